"""trainparity: differential tests for PyTorch training semantics."""

from trainparity.api import (
    AtLeastOnce,
    CommandCase,
    ExactComparison,
    ExactlyOnce,
    ExpectedPadding,
    NoCrossRankOverlap,
    Outcome,
    SameGlobalOrder,
    ToleranceComparison,
    audit_sample_coverage,
    check_accumulation,
    check_resume,
    check_runs,
    compare_states,
)
from trainparity.distributed.record_ids import record_ids
from trainparity.forensics.tracing import trace
from trainparity.recording.recorder import record
from trainparity.version import PACKAGE_VERSION as _PACKAGE_VERSION

__version__ = _PACKAGE_VERSION

__all__ = [
    "AtLeastOnce",
    "ExactlyOnce",
    "ExpectedPadding",
    "NoCrossRankOverlap",
    "SameGlobalOrder",
    "audit_sample_coverage",
    "check_accumulation",
    "ExactComparison",
    "Outcome",
    "ToleranceComparison",
    "__version__",
    "check_resume",
    "check_runs",
    "CommandCase",
    "compare_states",
    "record",
    "trace",
    "record_ids",
]
