"""`trainparity.results`: the check results and their report dictionary, a contract path (CONTRACT.md) kept as a face; see docs/api.md."""

from trainparity.accumulation.result import AccumulationResult as AccumulationResult
from trainparity.processes.evidence import ExternalProcessEvidence as ExternalProcessEvidence
from trainparity.reports.machine import report_dict as report_dict
from trainparity.resume.result import ProcessResumeResult as ProcessResumeResult
