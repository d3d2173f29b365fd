"""trainparity: differential tests for PyTorch training semantics.

The public names load on first use (PEP 562): `import trainparity`, and a
check's own process that only orchestrates children, never import torch;
the children that train, observe or compare tensors do (docs/limitations.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainparity.lazy_names import lazy_face
from trainparity.version import PACKAGE_VERSION as _PACKAGE_VERSION

if TYPE_CHECKING:  # the names for type checkers; at run time __getattr__ loads them
    from trainparity.accumulation.check import check_accumulation as check_accumulation
    from trainparity.cases.command_case import CommandCase as CommandCase
    from trainparity.comparison.noise import NoiseComparison as NoiseComparison
    from trainparity.comparison.policies import ExactComparison as ExactComparison
    from trainparity.comparison.policies import ToleranceComparison as ToleranceComparison
    from trainparity.comparison.states import compare_states as compare_states
    from trainparity.coverage.audit import AtLeastOnce as AtLeastOnce
    from trainparity.coverage.audit import ExactlyOnce as ExactlyOnce
    from trainparity.coverage.audit import ExpectedPadding as ExpectedPadding
    from trainparity.coverage.audit import NoCrossRankOverlap as NoCrossRankOverlap
    from trainparity.coverage.audit import audit_sample_coverage as audit_sample_coverage
    from trainparity.coverage.global_order import SameGlobalOrder as SameGlobalOrder
    from trainparity.forensics.tracing import trace as trace
    from trainparity.outcomes import Outcome as Outcome
    from trainparity.processes.warm.pool import shared_warm_servers as shared_warm_servers
    from trainparity.recording.record_ids import record_ids as record_ids
    from trainparity.recording.recorder import record as record
    from trainparity.resume.check import check_resume as check_resume
    from trainparity.runs.check import check_runs as check_runs
    from trainparity.why.explain import explain as explain

__version__ = _PACKAGE_VERSION

# Each public name and the module that defines it.
_DEFINED_IN = {
    "AtLeastOnce": "trainparity.coverage.audit",
    "ExactlyOnce": "trainparity.coverage.audit",
    "ExpectedPadding": "trainparity.coverage.audit",
    "NoCrossRankOverlap": "trainparity.coverage.audit",
    "SameGlobalOrder": "trainparity.coverage.global_order",
    "audit_sample_coverage": "trainparity.coverage.audit",
    "check_accumulation": "trainparity.accumulation.check",
    "ExactComparison": "trainparity.comparison.policies",
    "Outcome": "trainparity.outcomes",
    "ToleranceComparison": "trainparity.comparison.policies",
    "NoiseComparison": "trainparity.comparison.noise",
    "check_resume": "trainparity.resume.check",
    "check_runs": "trainparity.runs.check",
    "CommandCase": "trainparity.cases.command_case",
    "shared_warm_servers": "trainparity.processes.warm.pool",
    "compare_states": "trainparity.comparison.states",
    "record": "trainparity.recording.recorder",
    "trace": "trainparity.forensics.tracing",
    "explain": "trainparity.why.explain",
    "record_ids": "trainparity.recording.record_ids",
}

__all__ = ["__version__", *_DEFINED_IN]


__getattr__, __dir__ = lazy_face(__name__, _DEFINED_IN, globals(), submodules=True)
