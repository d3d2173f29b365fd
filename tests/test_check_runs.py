"""check_runs: variants that agree, differ, disagree with themselves, or cannot run."""

from __future__ import annotations

import json

import pytest
from trainparity import Outcome, check_runs
from trainparity._internal.cli.main import main
from trainparity._internal.runs.check import RunVariant

CASE = "tests.fixtures.runs_cases:ToyRuns"


def test_variants_that_agree_pass_and_one_that_differs_fails_at_its_first_path(tmp_path):
    report = tmp_path / "report.json"
    result = check_runs(
        CASE,
        {
            "unit": {},
            "unit_by_env": RunVariant(env={"TOY_SCALE": "1"}),
            "double": {"env": {"TOY_SCALE": "2"}},
        },
        temporary_root=tmp_path / "tmp",
        report_path=report,
    )
    assert result.outcome == Outcome.FAIL, result.message
    assert result.message == "variants unit and double first differ at step 5: position"
    assert (result.reference_variant, result.divergent_variant) == ("unit", "double")
    assert result.primary_difference.path == "position"
    verdicts = [(c.reference, c.variant, c.outcome) for c in result.variant_comparisons]
    assert verdicts == [
        ("unit", "unit", Outcome.PASS),
        ("unit_by_env", "unit_by_env", Outcome.PASS),
        ("double", "double", Outcome.PASS),
        ("unit", "unit_by_env", Outcome.PASS),
        ("unit", "double", Outcome.FAIL),
    ]
    assert [p.phase for p in result.processes] == [
        f"{variant}_{repeat}" for variant in ("unit", "unit_by_env", "double") for repeat in "ab"
    ]
    assert result.variant_environment_keys == {
        "unit": (),
        "unit_by_env": ("TOY_SCALE",),
        "double": ("TOY_SCALE",),
    }
    written = json.loads(report.read_text())
    assert written["outcome"] == "FAIL" and written["divergent_variant"] == "double"
    assert written["variant_comparisons"][-1]["outcome"] == "FAIL"
    assert "<section class='tp-variants'>" in result._repr_html_()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_variant_that_disagrees_with_itself_abstains(tmp_path):
    result = check_runs(
        CASE, {"steady": {}, "noisy": {"args": ["--noisy"]}}, temporary_root=tmp_path
    )
    assert result.outcome == Outcome.ABSTAIN, result.message
    assert result.divergent_variant == "noisy"
    assert result.message.startswith("variant noisy is not self-consistent")
    assert result.primary_difference.path == "position"


def test_a_variant_that_cannot_run_is_an_error_naming_its_run(tmp_path):
    result = check_runs(CASE, {"fine": {}, "broken": {"args": ["--crash"]}}, work_dir=tmp_path)
    assert result.outcome == Outcome.ERROR
    # The toy exits 1 without a word: the message says so instead of pointing at an empty log.
    assert result.message == "broken_a child exited with status 1\nbroken_a's stderr is empty"


@pytest.mark.parametrize(
    ("variants", "words"),
    [
        ({"only": {}}, "at least two variants"),
        ({"a": {}, "b/c": {}}, "must be letters"),
        ({"a": {}, "b": {"argv": ["--x"]}}, "unknown keys"),
        ({"a": {}, "b": {"args": "--noisy"}}, "not one string"),
        ({"a": {}, "b": {"env": {"K=V": "1"}}}, "invalid environment variable"),
    ],
)
def test_bad_variant_declarations_are_setup_errors_before_anything_runs(tmp_path, variants, words):
    result = check_runs(CASE, variants, temporary_root=tmp_path)
    assert result.outcome == Outcome.ERROR
    assert result.message.startswith("runs case setup failed")
    assert words in result.message
    assert result.usage_error == "variants"
    assert result.processes == () and list(tmp_path.iterdir()) == []


def test_cli_runs_the_cases_own_variants_and_exits_with_the_outcome(capsys, tmp_path):
    code = main(["runs", CASE, "--json", "--work-dir", str(tmp_path), "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report["message"]
    assert report["variants"] == ["unit", "unit_by_env"]
    assert report["message"] == "all 2 variants end exactly equal at step 5"
    assert (tmp_path / "snapshots" / "unit_by_env_b.safetensors").is_file()


def test_a_reused_work_dir_is_observed_afresh(tmp_path):
    first = check_runs(CASE, {"unit": {}, "double": {"env": {"TOY_SCALE": "2"}}}, work_dir=tmp_path)
    assert first.outcome == Outcome.FAIL, first.message
    # Same directory, now variants that agree: the last check's snapshots must not be reused.
    second = check_runs(
        CASE, {"unit": {}, "double": {"env": {"TOY_SCALE": "1"}}}, work_dir=tmp_path
    )
    assert second.outcome == Outcome.PASS, second.message


RECORDED = "tests.fixtures.runs_cases:RecordedToyRuns"


def test_recorded_runs_are_compared_step_by_step_and_the_fail_names_the_first_step(tmp_path):
    result = check_runs(
        RECORDED,
        {
            "plain": {},
            "nudged_late": {"args": ["--nudge-at", "5"]},
            "nudged": {"args": ["--nudge-at", "3"]},
        },
        temporary_root=tmp_path,
    )
    assert result.outcome == Outcome.FAIL, result.message
    # The first variant that differs is the FAIL, at the step where its records part.
    assert result.divergent_variant == "nudged_late"
    assert result.first_divergent_step == 5
    assert result.message == "variants plain and nudged_late first differ at step 5: model.weight"
    assert [c.first_path for c in result.variant_comparisons[-2:]] == [
        "model.weight",
        "model.weight",
    ]
    trajectory = result.trajectory
    assert trajectory["ranks"] == [0]
    assert trajectory["recorded_steps"]["nudged_a"] == [1, 2, 3, 4, 5]
    assert trajectory["first_divergence"]["candidate_phase"] == "nudged_late_a"
    assert [d.path for d in result.final_state_differences] == ["model.weight"]


def test_a_run_that_records_nothing_while_its_twin_does_is_an_error(tmp_path):
    result = check_runs(
        RECORDED,
        {"plain": {}, "silent": {"args": ["--skip-record"]}},
        temporary_root=tmp_path,
    )
    assert result.outcome == Outcome.ERROR, result.message
    assert result.message == (
        "silent_a recorded no step but plain_a did: record() must run in every run"
    )
