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

# Each public module path of the contract and, for every name it hands out, the private module
# that defines it. The face must hand out that very object.
FACE_NAMES = {
    "trainparity.accumulation": {
        "trainparity._internal.accumulation.check": [
            "AccumulationRunner",
            "check_accumulation",
            "declared_equivalence",
            "write_accumulation_report",
        ],
        "trainparity._internal.accumulation.execution": ["CHILD_NAMES"],
        "trainparity._internal.accumulation.plan": [
            "AccumulationExecutionPlan",
            "INITIAL_KEY",
            "PHASES",
            "UnsafeBatchSplit",
            "split_for_case",
            "split_tensor_tree",
        ],
    },
    "trainparity.comparison": {
        "trainparity._internal.comparison.policies": [
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
    "trainparity.importing": {
        "trainparity._internal.cases.loading": [
            "CaseImportError",
            "CaseSetupError",
            "CaseSetupTypeError",
            "load_accumulation_case",
            "load_process_case",
            "load_runs_case",
        ],
    },
    "trainparity.process_resume": {
        "trainparity._internal.resume.check": ["ProcessResumeRunner", "check_resume"],
    },
    "trainparity.results": {
        "trainparity._internal.accumulation.result": ["AccumulationResult"],
        "trainparity._internal.processes.check_result": ["ExternalProcessEvidence"],
        "trainparity._internal.reports.machine": ["report_dict"],
        "trainparity._internal.resume.result": ["ProcessResumeResult"],
    },
    "trainparity.sample_coverage": {
        "trainparity._internal.coverage.arrays": ["RankArray"],
        "trainparity._internal.coverage.audit": [
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
        "trainparity._internal.coverage.global_order": [
            "GlobalOrderResult",
            "MovedId",
            "SameGlobalOrder",
            "audit_global_order",
        ],
    },
    "trainparity.snapshot": {
        "trainparity._internal.state.snapshot_capture": [
            "CaptureIssue",
            "CaptureResult",
            "capture_snapshot",
        ],
        "trainparity._internal.state.snapshot": [
            "REFERENCE_BACKEND",
            "SNAPSHOT_SCHEMA_VERSION",
            "Snapshot",
        ],
    },
    "trainparity.state": {
        "trainparity._internal.state.freeze": [
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
        "trainparity._internal.state.paths": ["render_path"],
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


def test_api_module_hands_out_the_front_doors_list_and_the_same_objects():
    assert trainparity.api.__all__ == trainparity.__all__
    for name in trainparity.__all__:
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
    faces = package / "integrations"  # the public faces of the integrations
    private = package / "_internal"
    integrations = private / "integrations"  # names its libraries by design; the core does not
    # DeepSpeed's checkpoint readers go beside load_dcp in checkpoints/ (DESIGN.md): the
    # readers themselves (ZeRO and universal), the directory dispatch the default observer calls, and their exports.
    # Each imports deepspeed lazily, inside a function (test_checkpoints_import_no_framework).
    deepspeed_reader = {
        private / "checkpoints" / name
        for name in ("deepspeed_zero.py", "deepspeed_universal.py", "directories.py", "__init__.py")
    } | {package / "checkpoints.py"}
    # The launch module reads the `deepspeed` launcher's command line, as it reads torchrun's
    # (its fixed --master_port), and names what a warm launcher forks (forked_launcher); it
    # never imports it.
    launcher_reader = private / "distributed" / "torchrun_argv.py"
    for source in package.rglob("*.py"):
        if source.is_relative_to(integrations) or source.is_relative_to(faces):
            continue
        if source in deepspeed_reader | {launcher_reader}:
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
        "print(sorted(m for m in sys.modules if m.startswith('trainparity._internal.accumulation.')))"
    )
    # trainparity/__init__ loads the public API (and with it accumulation.check); the face
    # itself adds nothing, and asking it for a name loads that name's home.
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert "trainparity._internal.accumulation.worker" not in completed.stdout
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = import_module("trainparity.accumulation").nothing_here
