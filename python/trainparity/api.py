"""The public API: every name users import, gathered from the modules that define them."""

from trainparity.accumulation import AccumulationExecutionPlan, check_accumulation
from trainparity.comparison import (
    ComparisonPolicy,
    Difference,
    ExactComparison,
    ToleranceComparison,
)
from trainparity.environment import environment_fingerprint
from trainparity.forensics.trace_diff import TraceDiff, diff_traces
from trainparity.forensics.tracing import trace
from trainparity.outcomes import Outcome
from trainparity.process_resume import check_resume
from trainparity.protocols import (
    AccumulationCase,
    LossAccounting,
    ProcessExecutionPlan,
    ProcessResumeCase,
    RunsCase,
    TrainingState,
)
from trainparity.recording import RecordingDiff, diff_recordings, record, recording_to
from trainparity.results import AccumulationResult, ProcessResumeResult
from trainparity.runs import RunVariant, check_runs
from trainparity.runs_result import RunsResult, VariantComparison
from trainparity.sample_coverage import (
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
from trainparity.snapshot_diff import SnapshotDiff, diff_snapshots
from trainparity.state_diff import StateComparison, TensorStatistics, compare_states
from trainparity.version import MACHINE_REPORT_SCHEMA_VERSION

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
    "check_resume",
    "check_runs",
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
