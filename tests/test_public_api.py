"""The public surface: exported names match docs/api.md; versions; identity of re-exports."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import import_module, metadata
from pathlib import Path

import pytest
import trainparity
import trainparity.api

API_DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"

# Each face (a contract or documented module path kept after the wings redesign) and, for
# every name it had before, the module that defines it now. The face must hand out that very object.
FACE_NAMES = {
    "trainparity.accumulation": {
        "trainparity.accumulation.check": [
            "AccumulationRunner",
            "check_accumulation",
            "declared_equivalence",
            "write_accumulation_report",
        ],
        "trainparity.accumulation.execution": ["CHILD_NAMES"],
        "trainparity.accumulation.plan": [
            "AccumulationExecutionPlan",
            "INITIAL_KEY",
            "PHASES",
            "UnsafeBatchSplit",
            "split_for_case",
            "split_tensor_tree",
        ],
    },
    "trainparity.comparison": {
        "trainparity.comparison.policies": [
            "ComparisonPolicy",
            "ComparisonResult",
            "Difference",
            "ExactComparison",
            "MISSING",
            "TensorRecord",
            "ToleranceComparison",
            "collect_differences",
            "policy_report_fields",
            "summarize",
        ],
    },
    "trainparity.cuda_backend": {
        "trainparity.native.cuda": [
            "BLOCK_ALIGNMENT",
            "CPU_BACKEND",
            "CompareResult",
            "DeviceTensorBytes",
            "HOST_BLOCK_BYTES",
            "HOST_STREAM_BACKEND",
            "KERNEL_BACKEND",
            "compare_buffers",
            "core_threads",
            "digest_buffer",
            "iter_host_blocks",
            "summary_buffer",
            "write_buffer",
        ],
        "trainparity.native.cuda_kernels": [
            "KERNELS_VARIABLE",
            "build_kernels",
            "kernel_unavailable_reason",
            "kernels_available",
        ],
    },
    "trainparity.display": {
        "trainparity.reports.html_views": ["OUTCOME_COLOURS", "html_fragment", "result_html"],
        "trainparity.reports.notebook": ["NotebookProgress"],
        "trainparity.reports.sections.cells": ["Section"],
        "trainparity.reports.sections.report": ["report_sections"],
        "trainparity.reports.text_views": ["headline", "result_repr", "text_report"],
    },
    "trainparity.distributed.record_ids": {
        "trainparity.recording.record_ids": [
            "FLUSH_IDS",
            "IDS_DIR_VARIABLE",
            "ConsumptionSteps",
            "batch_ends",
            "consumption_steps",
            "flush_ids",
            "mark_step",
            "read_recorded_ids",
            "record_ids",
            "recorded_epochs",
            "recorded_ids",
        ],
    },
    "trainparity.distributed.ids_audit": {
        "trainparity.coverage.recorded_ids": ["audit_recorded_chain", "audit_recorded_ids"],
    },
    "trainparity.html_report": {
        "trainparity.reports.html": ["render_html_report", "write_html_report"],
    },
    "trainparity.importing": {
        "trainparity.cases.loading": [
            "CaseImportError",
            "CaseSetupError",
            "CaseSetupTypeError",
            "load_accumulation_case",
            "load_process_case",
            "load_runs_case",
        ],
    },
    "trainparity.phase_plan": {
        "trainparity.cases.phase_plan": [
            "PHASE_VARIABLES",
            "PhasePlan",
            "current_phase_plan",
            "plan_command",
            "plan_environment",
        ],
    },
    "trainparity.process_resume": {
        "trainparity.resume.check": ["ProcessResumeRunner", "check_resume"],
    },
    "trainparity.processes": {
        "trainparity.processes.group": [
            "ChildGroup",
            "ChildLaunchError",
            "ChildResult",
            "ChildSpec",
            "DEFAULT_GRACE_SECONDS",
            "EventCallback",
            "EventKind",
            "run_children",
        ],
    },
    "trainparity.progress": {
        "trainparity.processes.progress": ["ProgressEvent", "ProgressReporter"],
    },
    "trainparity.results": {
        "trainparity.accumulation.result": ["AccumulationResult"],
        "trainparity.processes.evidence": ["ExternalProcessEvidence"],
        "trainparity.reports.machine": ["report_dict"],
        "trainparity.resume.result": ["ProcessResumeResult"],
    },
    "trainparity.sample_coverage": {
        "trainparity.coverage.arrays": ["RankArray"],
        "trainparity.coverage.audit": [
            "AtLeastOnce",
            "B",
            "CoveragePolicy",
            "ExactlyOnce",
            "ExpectedPadding",
            "NoCrossRankOverlap",
            "SampleAnomaly",
            "SampleCoverageAuditor",
            "SampleCoverageResult",
            "SampleObservation",
            "SampleViolation",
            "audit_rank_arrays",
            "audit_rank_iterables",
            "audit_sample_coverage",
        ],
        "trainparity.coverage.global_order": [
            "GlobalOrderResult",
            "MovedId",
            "SameGlobalOrder",
            "audit_global_order",
        ],
    },
    "trainparity.snapshot": {
        "trainparity.state.capture": ["CaptureIssue", "CaptureResult", "capture_snapshot"],
        "trainparity.state.snapshot": ["REFERENCE_BACKEND", "SNAPSHOT_SCHEMA_VERSION", "Snapshot"],
    },
    "trainparity.snapshot_diff": {
        "trainparity.comparison.snapshots": ["SnapshotDiff", "diff_snapshots"],
    },
    "trainparity.snapshot_file": {
        "trainparity.state.snapshot_file": [
            "SNAPSHOT_FILE_FORMAT",
            "SnapshotFileInfo",
            "read_snapshot",
            "write_snapshot",
        ],
        "trainparity.state.tree_codec": ["SnapshotFileError", "decode_tree", "encode_tree"],
    },
    "trainparity.state": {
        "trainparity.state.freeze": [
            "AmbiguousStateNameError",
            "FrozenMapping",
            "FrozenSequence",
            "FrozenTensor",
            "FrozenValue",
            "FullValueBackend",
            "SCALAR_TYPES",
            "UnsupportedStateError",
            "contiguous_cpu",
            "freeze",
            "nested_named_values",
        ],
        "trainparity.state.paths": ["render_path"],
    },
    "trainparity.termination": {
        "trainparity.processes.termination": [
            "TERMINATING_SIGNALS",
            "TerminatedBySignal",
            "terminating_signals_unwind",
        ],
    },
}


def _documented(heading: str) -> set[str]:
    text = API_DOC.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)`", section, flags=re.MULTILINE))


def test_top_level_exports_match_the_api_doc():
    assert set(trainparity.__all__) == _documented("Exports of `trainparity`")
    for name in trainparity.__all__:
        assert hasattr(trainparity, name)


def test_api_module_exports_match_the_api_doc_and_are_the_same_objects():
    assert set(trainparity.api.__all__) == _documented("Exports of `trainparity.api`")
    for name in set(trainparity.__all__) & set(trainparity.api.__all__):
        assert getattr(trainparity, name) is getattr(trainparity.api, name)


def test_internal_names_are_not_exported():
    for name in ("PACKAGE_VERSION", "ExternalProcessEvidence", "SampleCoverageAuditor"):
        assert not hasattr(trainparity, name)
    for name in ("AccumulationRunner", "ProcessResumeRunner", "Snapshot", "capture_snapshot"):
        assert name not in trainparity.__all__ and name not in trainparity.api.__all__


def test_version_matches_distribution_and_schema_is_two():
    assert trainparity.__version__ == metadata.version("trainparity")
    assert trainparity.api.MACHINE_REPORT_SCHEMA_VERSION == 2


def test_outcome_is_a_string_enum():
    assert trainparity.Outcome.PASS == "PASS"
    assert str(trainparity.Outcome.ABSTAIN) == "ABSTAIN"
    assert [o.value for o in trainparity.Outcome] == ["PASS", "FAIL", "ABSTAIN", "ERROR"]


def test_production_sources_name_no_framework():
    package = Path(trainparity.__file__).resolve().parent
    integrations = package / "integrations"  # names its libraries by design; the core does not
    # DeepSpeed's checkpoint readers go beside load_dcp in checkpoints/ (DESIGN.md): the
    # readers themselves (ZeRO and universal), the directory dispatch the default observer calls, and their exports.
    # Each imports deepspeed lazily, inside a function (test_checkpoints_import_no_framework).
    deepspeed_reader = {
        package / "checkpoints" / name
        for name in ("deepspeed.py", "deepspeed_universal.py", "directories.py", "__init__.py")
    }
    # The launch module reads the `deepspeed` launcher's command line, as it reads torchrun's
    # (its fixed --master_port); it never imports it.
    launcher_reader = package / "distributed" / "launch.py"
    for source in package.rglob("*.py"):
        if source.is_relative_to(integrations) or source in deepspeed_reader | {launcher_reader}:
            continue
        text = source.read_text(encoding="utf-8").lower()
        for word in ("nanogpt", "imagenet", "ignite", "lightning", "transformers", "deepspeed"):
            assert word not in text, f"{word} in {source.name}"


def test_checkpoints_import_no_framework():
    code = (
        "import sys, trainparity.checkpoints; "
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'deepspeed'))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert completed.stdout == "[]\n"


@pytest.mark.parametrize("face", sorted(FACE_NAMES))
def test_every_face_hands_out_the_same_objects_as_their_homes(face):
    module = import_module(face)
    for home, names in FACE_NAMES[face].items():
        defining = import_module(home)
        for name in names:
            assert getattr(module, name) is getattr(defining, name), f"{face}.{name}"


def test_faces_are_listed_in_the_api_doc():
    text = API_DOC.read_text(encoding="utf-8")
    section = text.split("## Module paths\n", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(trainparity\.[a-z_.]+)` —", section)) >= set(FACE_NAMES)


def test_contract_internal_objects_keep_their_paths():
    from trainparity.accumulation import AccumulationRunner, UnsafeBatchSplit, split_tensor_tree
    from trainparity.importing import CaseImportError, load_accumulation_case, load_process_case
    from trainparity.process_resume import ProcessResumeRunner
    from trainparity.results import ExternalProcessEvidence
    from trainparity.sample_coverage import SampleCoverageAuditor
    from trainparity.snapshot import CaptureIssue, CaptureResult, Snapshot, capture_snapshot
    from trainparity.state import FrozenTensor, FullValueBackend, nested_named_values, render_path

    assert AccumulationRunner and UnsafeBatchSplit and split_tensor_tree and ProcessResumeRunner
    assert CaseImportError and load_accumulation_case and load_process_case
    assert ExternalProcessEvidence and SampleCoverageAuditor and Snapshot and capture_snapshot
    assert CaptureIssue and CaptureResult and FrozenTensor and FullValueBackend
    assert nested_named_values and render_path


def test_the_accumulation_package_never_loads_its_worker():
    probe = (
        "import sys, trainparity.accumulation as a;"
        "print(sorted(m for m in sys.modules if m.startswith('trainparity.accumulation.')))"
    )
    # trainparity/__init__ loads the public API (and with it accumulation.check); the face
    # itself adds nothing, and asking it for a name loads that name's home.
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert "trainparity.accumulation.worker" not in completed.stdout
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = import_module("trainparity.accumulation").nothing_here
