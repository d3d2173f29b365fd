"""Reports lead with the diagnosis in plain words: what was compared, what differs, what to try."""

from __future__ import annotations

from trainparity.reports.display import html_fragment, text_report


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
    text = text_report(report)
    assert "finding model first differs from the uninterrupted run at step 3" in _lines(text)
    assert "check what the checkpoint leaves out (data order, RNG, data loader position)" in text


def test_reports_without_a_divergence_have_no_diagnosis():
    report = _round_trip_report()
    report.update(outcome="PASS", trajectory={"first_divergence": None})
    assert "Diagnosis" not in text_report(report)
    assert "Diagnosis" not in text_report({"outcome": "PASS", "message": "ok", "case": "x"})
