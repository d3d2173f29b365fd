"""`trainparity.importing`: case loading and its errors, a contract path (docs/api.md, "Module paths")."""

from trainparity._internal.cases.loading import CaseImportError as CaseImportError
from trainparity._internal.cases.loading import CaseSetupError as CaseSetupError
from trainparity._internal.cases.loading import CaseSetupTypeError as CaseSetupTypeError
from trainparity._internal.cases.loading import load_accumulation_case as load_accumulation_case
from trainparity._internal.cases.loading import load_process_case as load_process_case
from trainparity._internal.cases.loading import load_runs_case as load_runs_case
