"""trainparity: differential tests for PyTorch training semantics.

This is the front door: every name users import is listed here once, with
the private module that defines it (`trainparity._internal`, docs/design.md,
"Two tiers"). The names load on first use (PEP 562): `import trainparity`,
and a check's own process that only orchestrates children, never import
torch; the children that train, observe or compare tensors do
(docs/limitations.md). `trainparity.api` hands out the same list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainparity._internal.lazy_names import lazy_face
from trainparity._internal.version import PACKAGE_VERSION as _PACKAGE_VERSION

if TYPE_CHECKING:  # the names for type checkers; at run time __getattr__ loads them
    from trainparity._internal.accumulation.check import (
        AccumulationExecutionPlan as AccumulationExecutionPlan,
    )
    from trainparity._internal.accumulation.check import check_accumulation as check_accumulation
    from trainparity._internal.accumulation.result import AccumulationResult as AccumulationResult
    from trainparity._internal.cases.command_case import CommandCase as CommandCase
    from trainparity._internal.cases.phase_plan import current_phase_plan as current_phase_plan
    from trainparity._internal.comparison.noise_policy import NoiseComparison as NoiseComparison
    from trainparity._internal.comparison.policies import ComparisonPolicy as ComparisonPolicy
    from trainparity._internal.comparison.policies import Difference as Difference
    from trainparity._internal.comparison.policies import ExactComparison as ExactComparison
    from trainparity._internal.comparison.policies import ToleranceComparison as ToleranceComparison
    from trainparity._internal.comparison.snapshots import SnapshotDiff as SnapshotDiff
    from trainparity._internal.comparison.snapshots import diff_snapshots as diff_snapshots
    from trainparity._internal.comparison.states import StateComparison as StateComparison
    from trainparity._internal.comparison.states import TensorStatistics as TensorStatistics
    from trainparity._internal.comparison.states import compare_states as compare_states
    from trainparity._internal.coverage.audit import AtLeastOnce as AtLeastOnce
    from trainparity._internal.coverage.audit import ExactlyOnce as ExactlyOnce
    from trainparity._internal.coverage.audit import ExpectedPadding as ExpectedPadding
    from trainparity._internal.coverage.audit import NoCrossRankOverlap as NoCrossRankOverlap
    from trainparity._internal.coverage.audit import SampleAnomaly as SampleAnomaly
    from trainparity._internal.coverage.audit import SampleCoverageResult as SampleCoverageResult
    from trainparity._internal.coverage.audit import SampleObservation as SampleObservation
    from trainparity._internal.coverage.audit import SampleViolation as SampleViolation
    from trainparity._internal.coverage.audit import audit_rank_arrays as audit_rank_arrays
    from trainparity._internal.coverage.audit import audit_rank_iterables as audit_rank_iterables
    from trainparity._internal.coverage.audit import audit_sample_coverage as audit_sample_coverage
    from trainparity._internal.coverage.global_order import SameGlobalOrder as SameGlobalOrder
    from trainparity._internal.crashes.check import check_crashes as check_crashes
    from trainparity._internal.crashes.result import CrashResult as CrashResult
    from trainparity._internal.environment import environment_fingerprint as environment_fingerprint
    from trainparity._internal.outcomes import Outcome as Outcome
    from trainparity._internal.processes.progress import ProgressEvent as ProgressEvent
    from trainparity._internal.processes.termination import TerminatedBySignal as TerminatedBySignal
    from trainparity._internal.processes.warm.pool import shared_warm_servers as shared_warm_servers
    from trainparity._internal.protocols import AccumulationCase as AccumulationCase
    from trainparity._internal.protocols import LossAccounting as LossAccounting
    from trainparity._internal.protocols import ProcessExecutionPlan as ProcessExecutionPlan
    from trainparity._internal.protocols import ProcessResumeCase as ProcessResumeCase
    from trainparity._internal.protocols import RunsCase as RunsCase
    from trainparity._internal.protocols import TrainingState as TrainingState
    from trainparity._internal.recording.diff import RecordingDiff as RecordingDiff
    from trainparity._internal.recording.diff import diff_recordings as diff_recordings
    from trainparity._internal.recording.reader import read_recording as read_recording
    from trainparity._internal.recording.reader import read_recordings as read_recordings
    from trainparity._internal.recording.record_ids import record_ids as record_ids
    from trainparity._internal.recording.recorder import record as record
    from trainparity._internal.recording.recorder import recording_to as recording_to
    from trainparity._internal.reports.html import write_html_report as write_html_report
    from trainparity._internal.reports.html_views import html_fragment as html_fragment
    from trainparity._internal.reports.notebook import NotebookProgress as NotebookProgress
    from trainparity._internal.reports.sections.report import report_sections as report_sections
    from trainparity._internal.reports.text_views import text_report as text_report
    from trainparity._internal.resume.check import check_resume as check_resume
    from trainparity._internal.resume.result import ProcessResumeResult as ProcessResumeResult
    from trainparity._internal.runs.check import RunVariant as RunVariant
    from trainparity._internal.runs.check import check_runs as check_runs
    from trainparity._internal.runs.result import RunsResult as RunsResult
    from trainparity._internal.runs.result import VariantComparison as VariantComparison
    from trainparity._internal.version import (
        MACHINE_REPORT_SCHEMA_VERSION as MACHINE_REPORT_SCHEMA_VERSION,
    )
    from trainparity._internal.why.explain import explain as explain
    from trainparity._internal.why.explanation import Explanation as Explanation
    from trainparity._internal.why.explanation import LeadTrial as LeadTrial
    from trainparity._internal.why.forensics.trace_diff import TraceDiff as TraceDiff
    from trainparity._internal.why.forensics.trace_diff import diff_traces as diff_traces
    from trainparity._internal.why.forensics.tracing import trace as trace
    from trainparity._internal.why.recordings import explain_recordings as explain_recordings

__version__ = _PACKAGE_VERSION

# Each public name and the module that defines it.
_DEFINED_IN = {
    "AccumulationExecutionPlan": "trainparity._internal.accumulation.check",
    "check_accumulation": "trainparity._internal.accumulation.check",
    "AccumulationResult": "trainparity._internal.accumulation.result",
    "CommandCase": "trainparity._internal.cases.command_case",
    "current_phase_plan": "trainparity._internal.cases.phase_plan",
    "NoiseComparison": "trainparity._internal.comparison.noise_policy",
    "ComparisonPolicy": "trainparity._internal.comparison.policies",
    "Difference": "trainparity._internal.comparison.policies",
    "ExactComparison": "trainparity._internal.comparison.policies",
    "ToleranceComparison": "trainparity._internal.comparison.policies",
    "SnapshotDiff": "trainparity._internal.comparison.snapshots",
    "diff_snapshots": "trainparity._internal.comparison.snapshots",
    "StateComparison": "trainparity._internal.comparison.states",
    "TensorStatistics": "trainparity._internal.comparison.states",
    "compare_states": "trainparity._internal.comparison.states",
    "AtLeastOnce": "trainparity._internal.coverage.audit",
    "ExactlyOnce": "trainparity._internal.coverage.audit",
    "ExpectedPadding": "trainparity._internal.coverage.audit",
    "NoCrossRankOverlap": "trainparity._internal.coverage.audit",
    "SampleAnomaly": "trainparity._internal.coverage.audit",
    "SampleCoverageResult": "trainparity._internal.coverage.audit",
    "SampleObservation": "trainparity._internal.coverage.audit",
    "SampleViolation": "trainparity._internal.coverage.audit",
    "audit_rank_arrays": "trainparity._internal.coverage.audit",
    "audit_rank_iterables": "trainparity._internal.coverage.audit",
    "audit_sample_coverage": "trainparity._internal.coverage.audit",
    "SameGlobalOrder": "trainparity._internal.coverage.global_order",
    "check_crashes": "trainparity._internal.crashes.check",
    "CrashResult": "trainparity._internal.crashes.result",
    "environment_fingerprint": "trainparity._internal.environment",
    "TraceDiff": "trainparity._internal.why.forensics.trace_diff",
    "diff_traces": "trainparity._internal.why.forensics.trace_diff",
    "trace": "trainparity._internal.why.forensics.tracing",
    "Outcome": "trainparity._internal.outcomes",
    "ProgressEvent": "trainparity._internal.processes.progress",
    "TerminatedBySignal": "trainparity._internal.processes.termination",
    "shared_warm_servers": "trainparity._internal.processes.warm.pool",
    "AccumulationCase": "trainparity._internal.protocols",
    "LossAccounting": "trainparity._internal.protocols",
    "ProcessExecutionPlan": "trainparity._internal.protocols",
    "ProcessResumeCase": "trainparity._internal.protocols",
    "RunsCase": "trainparity._internal.protocols",
    "TrainingState": "trainparity._internal.protocols",
    "RecordingDiff": "trainparity._internal.recording.diff",
    "diff_recordings": "trainparity._internal.recording.diff",
    "read_recording": "trainparity._internal.recording.reader",
    "read_recordings": "trainparity._internal.recording.reader",
    "record_ids": "trainparity._internal.recording.record_ids",
    "record": "trainparity._internal.recording.recorder",
    "recording_to": "trainparity._internal.recording.recorder",
    "write_html_report": "trainparity._internal.reports.html",
    "html_fragment": "trainparity._internal.reports.html_views",
    "NotebookProgress": "trainparity._internal.reports.notebook",
    "report_sections": "trainparity._internal.reports.sections.report",
    "text_report": "trainparity._internal.reports.text_views",
    "check_resume": "trainparity._internal.resume.check",
    "ProcessResumeResult": "trainparity._internal.resume.result",
    "RunVariant": "trainparity._internal.runs.check",
    "check_runs": "trainparity._internal.runs.check",
    "RunsResult": "trainparity._internal.runs.result",
    "VariantComparison": "trainparity._internal.runs.result",
    "MACHINE_REPORT_SCHEMA_VERSION": "trainparity._internal.version",
    "Explanation": "trainparity._internal.why.explanation",
    "LeadTrial": "trainparity._internal.why.explanation",
    "explain": "trainparity._internal.why.explain",
    "explain_recordings": "trainparity._internal.why.recordings",
}

__all__ = ["__version__", *_DEFINED_IN]


__getattr__, __dir__ = lazy_face(__name__, _DEFINED_IN, globals(), submodules=True)
