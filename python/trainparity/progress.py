"""`trainparity.progress`: progress events of a check, a documented path kept as a face; see docs/api.md."""

from trainparity.processes.progress import ProgressEvent as ProgressEvent
from trainparity.processes.progress import ProgressReporter as ProgressReporter
