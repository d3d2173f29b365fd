"""`trainparity.termination`: SIGTERM and SIGHUP during a check, a documented path kept as a face; see docs/api.md."""

from trainparity.processes.termination import TERMINATING_SIGNALS as TERMINATING_SIGNALS
from trainparity.processes.termination import TerminatedBySignal as TerminatedBySignal
from trainparity.processes.termination import (
    terminating_signals_unwind as terminating_signals_unwind,
)
