"""The public surface: exported names match docs/api.md; versions; identity of re-exports."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import trainparity
import trainparity.api

API_DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


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
    for source in package.rglob("*.py"):
        if source.is_relative_to(integrations):
            continue
        text = source.read_text(encoding="utf-8").lower()
        for word in ("nanogpt", "imagenet", "ignite", "lightning", "transformers", "deepspeed"):
            assert word not in text, f"{word} in {source.name}"
