"""Op-level forensics: trace one training step, then find the first op where two runs part.

`trace(...)` records every op of a step (forward, backward, optimizer) with
its module path and a digest and float64 summary of each value it read or
wrote; `diff_traces(a, b)` aligns two traces and says where the first
divergence was born, or which input it was inherited from, with the
environment leads that fit that kind of op. See docs/forensics.md.

The names load on first use (PEP 562): a training script's `record()` reads
forensics/variables.py without importing the tracer (and torch with it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainparity._internal.lazy_names import lazy_face

if TYPE_CHECKING:  # the names for type checkers; at run time __getattr__ loads them
    from trainparity._internal.why.forensics.records import Trace as Trace
    from trainparity._internal.why.forensics.records import TraceOp as TraceOp
    from trainparity._internal.why.forensics.records import TraceValue as TraceValue
    from trainparity._internal.why.forensics.trace_diff import TraceDiff as TraceDiff
    from trainparity._internal.why.forensics.trace_diff import diff_traces as diff_traces
    from trainparity._internal.why.forensics.trace_file import is_trace_file as is_trace_file
    from trainparity._internal.why.forensics.trace_file import read_trace as read_trace
    from trainparity._internal.why.forensics.trace_file import write_trace as write_trace
    from trainparity._internal.why.forensics.tracing import TraceSession as TraceSession
    from trainparity._internal.why.forensics.tracing import trace as trace

_DEFINED_IN = {
    "Trace": "trainparity._internal.why.forensics.records",
    "TraceDiff": "trainparity._internal.why.forensics.trace_diff",
    "TraceOp": "trainparity._internal.why.forensics.records",
    "TraceSession": "trainparity._internal.why.forensics.tracing",
    "TraceValue": "trainparity._internal.why.forensics.records",
    "diff_traces": "trainparity._internal.why.forensics.trace_diff",
    "is_trace_file": "trainparity._internal.why.forensics.trace_file",
    "read_trace": "trainparity._internal.why.forensics.trace_file",
    "trace": "trainparity._internal.why.forensics.tracing",
    "write_trace": "trainparity._internal.why.forensics.trace_file",
}

__all__ = sorted(_DEFINED_IN)


__getattr__, __dir__ = lazy_face(__name__, _DEFINED_IN, globals())
