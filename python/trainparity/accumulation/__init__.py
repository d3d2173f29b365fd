"""The accumulation wing: check_accumulation, its plan, execution, ranks, verdict, worker and result.

`trainparity.accumulation` is also a contract path. Its names are looked up on
first use, so that the worker (`python -m trainparity.accumulation.worker`),
which loads this package first, never imports the orchestrator it serves.
"""

from trainparity.lazy_names import lazy_face

_HOMES = {
    "AccumulationRunner": "trainparity.accumulation.check",
    "check_accumulation": "trainparity.accumulation.check",
    "declared_equivalence": "trainparity.accumulation.check",
    "write_accumulation_report": "trainparity.accumulation.check",
    "CHILD_NAMES": "trainparity.accumulation.execution",
    "AccumulationExecutionPlan": "trainparity.accumulation.plan",
    "INITIAL_KEY": "trainparity.accumulation.plan",
    "PHASES": "trainparity.accumulation.plan",
    "UnsafeBatchSplit": "trainparity.accumulation.plan",
    "split_for_case": "trainparity.accumulation.plan",
    "split_tensor_tree": "trainparity.accumulation.plan",
}
__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_face(__name__, _HOMES, globals())
