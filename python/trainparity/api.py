"""The public API: every name users import, gathered from the modules that define them."""

from trainparity.accumulation.check import AccumulationExecutionPlan, check_accumulation
from trainparity.accumulation.result import AccumulationResult
from trainparity.cases.command_case import CommandCase
from trainparity.comparison.noise import NoiseComparison
from trainparity.comparison.policies import (
    ComparisonPolicy,
    Difference,
    ExactComparison,
    ToleranceComparison,
)
from trainparity.comparison.snapshots import SnapshotDiff, diff_snapshots
from trainparity.comparison.states import StateComparison, TensorStatistics, compare_states
from trainparity.coverage.audit import (
    AtLeastOnce,
    ExactlyOnce,
    ExpectedPadding,
    NoCrossRankOverlap,
    SampleAnomaly,
    SampleCoverageResult,
    SampleObservation,
    SampleViolation,
    audit_rank_arrays,
    audit_rank_iterables,
    audit_sample_coverage,
)
from trainparity.coverage.global_order import SameGlobalOrder
from trainparity.environment import environment_fingerprint
from trainparity.forensics.trace_diff import TraceDiff, diff_traces
from trainparity.forensics.tracing import trace
from trainparity.outcomes import Outcome
from trainparity.protocols import (
    AccumulationCase,
    LossAccounting,
    ProcessExecutionPlan,
    ProcessResumeCase,
    RunsCase,
    TrainingState,
)
from trainparity.recording import RecordingDiff, diff_recordings, record, recording_to
from trainparity.resume.check import check_resume
from trainparity.resume.result import ProcessResumeResult
from trainparity.runs.check import RunVariant, check_runs
from trainparity.runs.result import RunsResult, VariantComparison
from trainparity.version import MACHINE_REPORT_SCHEMA_VERSION
from trainparity.why.explain import Explanation, LeadTrial, explain
from trainparity.why.recordings import explain_recordings

__all__ = [
    "AccumulationCase",
    "AccumulationExecutionPlan",
    "AccumulationResult",
    "LossAccounting",
    "TrainingState",
    "check_accumulation",
    "AtLeastOnce",
    "ExactlyOnce",
    "ExpectedPadding",
    "NoCrossRankOverlap",
    "SameGlobalOrder",
    "SampleAnomaly",
    "SampleCoverageResult",
    "SampleObservation",
    "SampleViolation",
    "audit_rank_arrays",
    "audit_rank_iterables",
    "audit_sample_coverage",
    "MACHINE_REPORT_SCHEMA_VERSION",
    "ComparisonPolicy",
    "Difference",
    "ExactComparison",
    "Outcome",
    "ProcessExecutionPlan",
    "ProcessResumeCase",
    "ProcessResumeResult",
    "SnapshotDiff",
    "StateComparison",
    "TensorStatistics",
    "ToleranceComparison",
    "NoiseComparison",
    "explain",
    "explain_recordings",
    "Explanation",
    "LeadTrial",
    "check_resume",
    "check_runs",
    "CommandCase",
    "RunVariant",
    "RunsCase",
    "RunsResult",
    "VariantComparison",
    "compare_states",
    "diff_snapshots",
    "RecordingDiff",
    "diff_recordings",
    "record",
    "recording_to",
    "diff_traces",
    "environment_fingerprint",
    "trace",
    "TraceDiff",
]
