"""Reports of checks judged under NoiseComparison: the envelope in text, HTML and JSON.

Results are built directly with a `noise_envelope` shaped as check_resume
reports it; a result without one must render byte for byte as before.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ElementTree
from typing import Any

import pytest
from trainparity import Outcome
from trainparity._internal.reports.html import render_html_report
from trainparity._internal.reports.html_views import html_fragment
from trainparity._internal.reports.machine import report_text, write_report
from trainparity._internal.reports.sections.noise import envelope_points
from trainparity._internal.reports.text_views import text_report
from trainparity.api import Difference, ProcessResumeResult

CLOSEST_PATH = 'optimizer.state["1"].exp_avg_sq'
SENSITIVITY = (
    "a fault that changes a tensor of model.* by more than 2.5e-07, or of optimizer.* by more "
    "than 1.6e-06 (L2, relative to the norm of the component) at step 3 would have been seen; every "
    "other path was judged bit for bit"
)


def _row(step: int, candidate: str | None, noise: float, excursion: float | None) -> dict[str, Any]:
    limit = 8.0 * noise
    return {
        "step": step,
        "rank": 0,
        "candidate": candidate,
        "noise": {"model": noise / 4, "optimizer": noise},
        "excursion": {} if excursion is None else {"model": 0.0, "optimizer": excursion},
        "limit": {"model": limit / 4, "optimizer": limit},
        "largest_ratio": None,
    }


def _envelope(*, left_at: int | None = None) -> dict[str, Any]:
    """Samples alone at steps 0-2, the resumed candidate from step 3; it leaves at `left_at`."""
    steps = [
        {**_row(0, None, 0.0, None), "noise": {}, "limit": {}},
        _row(1, None, 2e-7, None),
        _row(2, None, 2e-7, None),
        _row(3, "candidate_resume", 2e-7, 0.0),  # equal right after loading: drawn on the edge
        _row(4, "candidate_resume", 2e-7, 2e-7 if left_at != 4 else 1e-4),
        _row(5, "candidate_resume", 1.5e-7, 1e-7),
    ]
    if left_at is None:
        closest = {"ratio": 1.0, "step": 4, "path": CLOSEST_PATH, "noise": 2e-7}
    else:
        closest = {"ratio": 500.0, "step": 4, "path": 'model["0.bias"]', "noise": 2e-7}
    return {
        "factor": 8.0,
        "baselines": 3,
        "floor_rtol": 0.0,
        "floor_atol": 0.0,
        "max_noise": None,
        "judged_on": "recorded steps",
        "samples": ["baseline_a", "baseline_b", "baseline_c", "candidate_split (up to its save)"],
        "steps": steps,
        "closest_approach": {
            **closest,
            "candidate": "candidate_resume",
            "excursion": closest["ratio"] * 2e-7,
        },
        "sensitivity": SENSITIVITY,
    }


def _result(outcome: Outcome, envelope: dict[str, Any] | None) -> ProcessResumeResult:
    if outcome is Outcome.FAIL:
        first = Difference('model["0.bias"]', "noise_envelope", "a", "b", 1e-4, 1e-4)
        return ProcessResumeResult(
            outcome=outcome,
            message='first observed divergence at step 4: model["0.bias"] left the noise envelope',
            case="cases:Lossy",
            first_divergent_step=4,
            primary_difference=first,
            all_differences=(first,),
            comparison_policy="noise_envelope",
            fresh_resume_processes_distinct=True,
            noise_envelope=envelope,
        )
    message = {
        Outcome.PASS: "the candidate stayed inside the noise envelope at every recorded step",
        Outcome.ABSTAIN: "the run-to-run noise at step 3 is 0.2, above max_noise=0.01",
    }[outcome]
    return ProcessResumeResult(
        outcome=outcome,
        message=message,
        case="cases:Noisy",
        comparison_policy="noise_envelope",
        fresh_resume_processes_distinct=True,
        noise_envelope=envelope,
    )


def _noise_section(fragment: str) -> str:
    found = re.search(r"<section class='tp-noise-envelope'>.*?</figure></section>", fragment)
    if found is None:  # a section without a figure (nothing judged step by step)
        found = re.search(r"<section class='tp-noise-envelope'>.*?</section>", fragment)
    assert found is not None, fragment
    return found.group()


@pytest.mark.parametrize("outcome", [Outcome.PASS, Outcome.FAIL, Outcome.ABSTAIN])
def test_text_shows_the_sensitivity_under_every_verdict_and_the_approach_on_pass(outcome):
    envelope = _envelope(left_at=4 if outcome is Outcome.FAIL else None)
    lines = text_report(_result(outcome, envelope).to_dict()).splitlines()
    assert lines[0].startswith(f"{outcome.value}: ")
    assert lines[1] == f"  sensitivity: {SENSITIVITY}"
    if outcome is Outcome.PASS:
        assert lines[2] == f"  closest approach: 1× the noise at step 4, {CLOSEST_PATH}"
    else:
        assert not any("closest approach" in line for line in lines)
    assert lines[2 if outcome is not Outcome.PASS else 3] == ""


def test_a_pass_matched_bit_for_bit_says_so_instead_of_an_approach():
    envelope = {**_envelope(), "closest_approach": None}
    lines = text_report(_result(Outcome.PASS, envelope).to_dict()).splitlines()
    assert (
        lines[2] == "  closest approach: none: every judged value matched the samples bit for bit"
    )


def test_html_has_the_envelope_section_and_marks_the_exit_of_a_fail_only():
    failed = html_fragment(_result(Outcome.FAIL, _envelope(left_at=4)).to_dict())
    passed = html_fragment(_result(Outcome.PASS, _envelope()).to_dict())
    for fragment in (failed, passed):
        section = _noise_section(fragment)
        assert "<h3>Noise envelope</h3>" in section
        assert "<th>factor</th><td>8</td>" in section
        assert "<th>baselines</th><td>3</td>" in section
        assert "<th>floor</th><td>rtol=0, atol=0</td>" in section
        assert "<th>max noise</th><td>none (no limit)</td>" in section
        assert f"<th>sensitivity</th><td>{SENSITIVITY}</td>" in section
        assert "<svg " in section and "tp-noise-band" in section and "tp-noise-limit" in section
        assert "bottom edge" in section  # the caption says where zeros are drawn
        assert not re.search(r"<script|https?://(?!www\.w3\.org/2000/svg)", section)
    assert "tp-noise-exit" in failed and "first exit: step 4" in failed
    assert "<th>first exit</th><td>step 4</td>" in failed
    assert "tp-noise-exit" not in passed and "first exit" not in passed
    assert "<th>closest approach</th>" in passed
    assert "<th>largest excursion / noise</th>" in failed


def test_the_figure_is_well_formed_svg_and_draws_zeros_hollow_on_the_bottom_edge():
    fragment = html_fragment(_result(Outcome.FAIL, _envelope(left_at=4)).to_dict())
    svg = re.search(r"<svg .*?</svg>", _noise_section(fragment)).group()
    root = ElementTree.fromstring(svg)
    namespace = "{http://www.w3.org/2000/svg}"
    frame = root.find(f"{namespace}rect")
    bottom = float(frame.get("y")) + float(frame.get("height"))
    points = [
        circle
        for circle in root.iter(f"{namespace}circle")
        if "tp-noise-exit" not in (circle.get("class") or "")
    ]
    assert len(points) == 3  # steps 3, 4 and 5 of the candidate
    hollow = [circle for circle in points if circle.get("fill") == "#ffffff"]
    assert len(hollow) == 1 and float(hollow[0].get("cy")) == pytest.approx(bottom, abs=0.1)
    assert (
        "step 3, candidate_resume: excursion 0.000e+00" in hollow[0].find(f"{namespace}title").text
    )
    ringed = [
        circle
        for circle in root.iter(f"{namespace}circle")
        if circle.get("class") == "tp-noise-exit"
    ]
    assert len(ringed) == 1


def test_steps_fold_into_one_point_each_largest_over_components_and_ranks():
    envelope = _envelope()
    envelope["steps"].append({**_row(5, "candidate_resume", 3e-7, 4e-7), "rank": 1})
    points = envelope_points(envelope)
    assert [point.step for point in points] == [0, 1, 2, 3, 4, 5]
    assert points[0].noise == 0.0 and points[0].excursions == ()
    assert points[1].excursions == ()  # samples alone before the split
    assert points[5].noise == 3e-7 and points[5].limit == pytest.approx(2.4e-6)
    assert points[5].excursions == (("candidate_resume", 4e-7),)


def test_an_envelope_without_steps_shows_its_table_and_no_figure():
    envelope = {**_envelope(), "steps": [], "closest_approach": None, "sensitivity": None}
    result = _result(Outcome.ABSTAIN, envelope)
    section = _noise_section(html_fragment(result.to_dict()))
    assert "<svg" not in section and "<th>sensitivity</th>" not in section
    assert text_report(result.to_dict()).splitlines()[1] == ""


def test_one_step_and_infinite_ratios_still_draw():
    envelope = _envelope(left_at=4)
    envelope["steps"] = [_row(3, "candidate_resume", 0.0, 0.25)]
    envelope["closest_approach"] = {**envelope["closest_approach"], "ratio": math.inf}
    result = _result(Outcome.FAIL, {**envelope})
    fragment = html_fragment(result.to_dict())
    assert "inf× the noise at step 4" in fragment
    ElementTree.fromstring(re.search(r"<svg .*?</svg>", fragment).group())


def test_the_json_report_carries_the_envelope(tmp_path):
    envelope = _envelope()
    result = _result(Outcome.PASS, envelope)
    assert result.to_dict()["noise_envelope"] == envelope
    path = tmp_path / "report.json"
    write_report(path, result.to_dict())
    assert json.loads(path.read_text())["noise_envelope"] == envelope
    assert "noise_envelope" not in _result(Outcome.PASS, None).to_dict()


@pytest.mark.parametrize("outcome", [Outcome.PASS, Outcome.FAIL, Outcome.ABSTAIN])
def test_without_an_envelope_every_view_is_as_before(outcome):
    envelope = _envelope(left_at=4 if outcome is Outcome.FAIL else None)
    judged = _result(outcome, envelope).to_dict()
    plain = _result(outcome, None).to_dict()
    # The envelope adds its lines and its section, and nothing else changes.
    noise_lines = ("  sensitivity: ", "  closest approach: ")
    assert [
        line for line in text_report(judged).splitlines() if not line.startswith(noise_lines)
    ] == text_report(plain).splitlines()
    assert html_fragment(judged).replace(_noise_section(html_fragment(judged)), "") == (
        html_fragment(plain)
    )
    without_key = {key: value for key, value in judged.items() if key != "noise_envelope"}
    assert text_report(without_key) == text_report(plain)
    assert render_html_report(without_key) == render_html_report(plain)
    assert report_text(without_key) == report_text(plain)


def test_the_views_are_byte_deterministic():
    first = _result(Outcome.FAIL, _envelope(left_at=4))
    second = _result(Outcome.FAIL, _envelope(left_at=4))
    assert render_html_report(first) == render_html_report(second)
    assert text_report(first.to_dict()) == text_report(second.to_dict())
    assert first._repr_html_() == html_fragment(second.to_dict())  # the notebook view
