"""`trainparity.results`: the check results and their report dictionary, a contract path (docs/api.md, "Module paths")."""

from trainparity._internal.accumulation.result import AccumulationResult as AccumulationResult
from trainparity._internal.processes.check_result import (
    ExternalProcessEvidence as ExternalProcessEvidence,
)
from trainparity._internal.reports.machine import report_dict as report_dict
from trainparity._internal.resume.result import ProcessResumeResult as ProcessResumeResult
