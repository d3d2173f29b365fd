"""Op-level forensics: trace one training step, then find the first op where two runs part.

`trace(...)` records every op of a step (forward, backward, optimizer) with
its module path and a digest and float64 summary of each value it read or
wrote; `diff_traces(a, b)` aligns two traces and says where the first
divergence was born, or which input it was inherited from, with the
environment leads that fit that kind of op. See docs/forensics.md.
"""

from trainparity.forensics.records import Trace, TraceOp, TraceValue
from trainparity.forensics.trace_diff import TraceDiff, diff_traces
from trainparity.forensics.trace_file import is_trace_file, read_trace, write_trace
from trainparity.forensics.tracing import TraceSession, trace

__all__ = [
    "Trace",
    "TraceDiff",
    "TraceOp",
    "TraceSession",
    "TraceValue",
    "diff_traces",
    "is_trace_file",
    "read_trace",
    "trace",
    "write_trace",
]
