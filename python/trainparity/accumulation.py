"""`trainparity.accumulation`, a contract path: check_accumulation, its plan and runner.

The names load on first use, like the front door's."""

from trainparity._internal.lazy_names import lazy_face

_HOMES = {
    "AccumulationRunner": "trainparity._internal.accumulation.check",
    "check_accumulation": "trainparity._internal.accumulation.check",
    "declared_equivalence": "trainparity._internal.accumulation.check",
    "write_accumulation_report": "trainparity._internal.accumulation.check",
    "CHILD_NAMES": "trainparity._internal.accumulation.execution",
    "AccumulationExecutionPlan": "trainparity._internal.accumulation.plan",
    "INITIAL_KEY": "trainparity._internal.accumulation.plan",
    "PHASES": "trainparity._internal.accumulation.plan",
    "UnsafeBatchSplit": "trainparity._internal.accumulation.plan",
    "split_for_case": "trainparity._internal.accumulation.plan",
    "split_tensor_tree": "trainparity._internal.accumulation.plan",
}
__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_face(__name__, _HOMES, globals())
