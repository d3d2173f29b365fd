"""Reports lead with the diagnosis in plain words: what was compared, what differs, what to try."""

from __future__ import annotations

from trainparity._internal.reports.html_views import html_fragment
from trainparity._internal.reports.text_views import text_report


def _lines(text: str) -> list[str]:
    """Each line with its column padding collapsed."""
    return [" ".join(line.split()) for line in text.splitlines()]


def _round_trip_report() -> dict:
    return {
        "outcome": "FAIL",
        "message": "first observed divergence at step 2: scheduler._last_lr[0]",
        "case": "parity_case:ForgetfulResumeCase",
        "fresh_resume_processes_distinct": True,
        "first_divergent_step": 2,
        "all_differences": [],
        "timing_seconds": {"total_wall": 3.0},
        "trajectory": {
            "first_divergence": {
                "step": 2,
                "rank": 0,
                "baseline_phase": "baseline_a",
                "candidate_phase": "candidate_resume",
                "candidate_step": 2,
                "round_trip": True,
                "paths": ["scheduler._last_lr[0]", "scheduler.last_epoch"],
                "relative_rms_errors": {},
                "error_bounds": {},
            }
        },
    }


def test_a_round_trip_finding_is_said_in_plain_words_before_the_timings():
    text = text_report(_round_trip_report())
    assert _lines(text)[2:7] == [
        "Diagnosis",
        "compared baseline = baseline_a (the uninterrupted run); "
        "candidate = candidate_resume (the resumed run)",
        "finding right after loading, scheduler differs from the uninterrupted "
        "run at step 2: the resume does not restore it",
        "differing at step 2 scheduler._last_lr[0], scheduler.last_epoch",
        "try next save scheduler in the checkpoint and load it back "
        "(load_state_dict) before training continues",
    ]
    assert text.index("Diagnosis") < text.index("Timings")
    page = html_fragment(_round_trip_report())
    assert page.index("tp-diagnosis") < page.index("tp-timings")
    assert "the resume does not restore it" in page


def test_drift_after_a_clean_load_points_at_what_the_checkpoint_leaves_out():
    report = _round_trip_report()
    first = report["trajectory"]["first_divergence"]
    first.update(round_trip=False, step=3, paths=["model.weight"])
    # The resumed run recorded its state right after loading (step 2), equal there.
    report["trajectory"]["recorded_steps"] = {
        "baseline_a": [0, 1, 2, 3],
        "candidate_resume": [2, 3],
    }
    text = text_report(report)
    assert "finding model first differs from the uninterrupted run at step 3" in _lines(text)
    assert "model loads equal but training drifts" in text
    assert "check what the checkpoint leaves out (data order, RNG, data loader position)" in text


def test_loads_equal_is_said_only_where_a_record_right_after_loading_shows_it():
    report = _round_trip_report()
    first = report["trajectory"]["first_divergence"]
    first.update(round_trip=False, step=3, paths=["model.weight"])
    # The resumed run's first record is after its first step: its loaded state is unknown.
    report["trajectory"]["recorded_steps"] = {"baseline_a": [1, 2, 3], "candidate_resume": [3]}
    text = text_report(report)
    assert "loads equal but" not in text
    assert "record() right after loading and after each step shows whether it loads equal" in text


def _unrecorded_rng_report(floats: int) -> dict:
    """An RNG-not-restored FAIL of a script without record(): only final states, the RNG's
    uint8 state last in traversal order behind the float tensors it made drift."""
    tensor = "tensor(shape=(4,), dtype=torch.{}, device=cpu, values=[1, 2])"
    differences = [
        {"path": f'model["w{index}"]', "reason": "tensor_value", "baseline": tensor.format(
            "float32"), "candidate": tensor.format("float32")}
        for index in range(floats)
    ]  # fmt: skip
    differences.append(
        {"path": "rng.torch", "reason": "tensor_value", "baseline": tensor.format("uint8"),
         "candidate": tensor.format("uint8")}
    )  # fmt: skip
    return {
        "outcome": "FAIL",
        "message": 'first observed divergence at step 6: model["w0"]',
        "case": "x:RngCase",
        "fresh_resume_processes_distinct": True,
        "first_divergent_step": 6,
        "all_differences": differences,
    }


def test_without_records_no_loads_equal_claim_and_the_rng_state_is_listed_first():
    lines = _lines(text_report(_unrecorded_rng_report(84)))
    diagnosis = lines[lines.index("Diagnosis") + 1 : lines.index("Summary")]
    text = "\n".join(diagnosis)
    assert "loads equal but" not in text
    finding = next(line for line in diagnosis if line.startswith("finding"))
    assert "listed first is rng.torch, exact state" in finding
    listed = next(line for line in diagnosis if line.startswith("differing paths"))
    assert listed.startswith('differing paths rng.torch, model["w0"],')
    # 85 paths are not one line of 85: twelve, then how many more and where all of them are.
    assert listed.count(",") == 12
    assert listed.endswith("and 73 more (all 85 under Differences)")
    # The Differences section, cut at ten rows, shows the RNG state too: it comes first.
    section = lines[lines.index("Differences") + 2 :]
    assert section[0].split()[0] == "rng.torch" and section[10] == "... 75 more"
    assert text_report(_unrecorded_rng_report(84)) == text_report(_unrecorded_rng_report(84))


def test_reports_without_a_divergence_have_no_diagnosis():
    report = _round_trip_report()
    report.update(outcome="PASS", trajectory={"first_divergence": None})
    assert "Diagnosis" not in text_report(report)
    assert "Diagnosis" not in text_report({"outcome": "PASS", "message": "ok", "case": "x"})


def test_baselines_that_part_are_said_to_be_nondeterministic_not_a_resume_fault():
    report = _round_trip_report()
    report["outcome"] = "ABSTAIN"
    first = report["trajectory"]["first_divergence"]
    first.update(candidate_phase="baseline_b", round_trip=False, step=3, paths=["model.weight"])
    lines = _lines(text_report(report))
    assert (
        "compared baseline = baseline_a (the uninterrupted run); candidate = baseline_b (its repeat)"
        in lines
    )
    assert (
        "finding the two uninterrupted runs already differ at step 3 in model: training is not "
        "deterministic, so no resume verdict is possible" in lines
    )
    assert any(line.startswith("try next make training deterministic") for line in lines)
    # The docs judge a nondeterministic script with NoiseComparison, and so does the report.
    try_next = next(line for line in lines if line.startswith("try next make training"))
    assert "NoiseComparison()" in try_next and "ToleranceComparison" not in try_next


def test_two_configurations_of_check_runs_are_named_as_they_are():
    report = _round_trip_report()
    first = report["trajectory"]["first_divergence"]
    first.update(
        baseline_phase="accum4x2_a", candidate_phase="accum1x8_a", round_trip=False, step=2
    )
    text = text_report(report)
    assert "first differs between accum4x2_a and accum1x8_a at step 2" in text
    assert "uninterrupted" not in text.split("Summary")[0]


def test_the_count_of_differences_matches_the_listed_rows_or_says_how_many_are_hidden():
    report = _round_trip_report()
    report["all_differences"] = [
        {"path": f"model.w{index}", "reason": "value", "baseline": "1", "candidate": "2"}
        for index in range(12)
    ]
    lines = _lines(text_report(report, max_rows=10))
    assert "differences 12 (listed under Differences)" in lines
    listed = lines[lines.index("Differences") + 2 :]
    assert [line.split()[0] for line in listed[:10]] == [f"model.w{index}" for index in range(10)]
    assert listed[10] == "... 2 more"


def test_the_drift_after_a_round_trip_finding_is_said_in_one_line():
    report = _round_trip_report()
    flat = {"model": 0.0, "optimizer": 0.0}
    report["trajectory"]["drift"] = [
        {"step": 2, "max_relative_rms_error": 0.0, "components": flat},
        {"step": 3, "max_relative_rms_error": 0.01, "components": {**flat, "model": 0.01}},
        {
            "step": 4,
            "max_relative_rms_error": 0.05,
            "components": {"model": 0.05, "optimizer": 0.02},
        },
    ]
    lines = _lines(text_report(report))
    diagnosis = lines[lines.index("Diagnosis") + 1 : lines.index("Summary")]
    assert diagnosis[3] == (
        "then model tensors differ from step 3 on; at step 4 the relative RMS error is 0.05 "
        "(see Drift)"
    )
    assert diagnosis[4].startswith("try next")
