"""Human views of results: one-line repr, notebook HTML, terminal text, live notebook progress."""

from __future__ import annotations

import pytest
from trainparity import Outcome
from trainparity._internal.processes.check_result import ExternalProcessEvidence
from trainparity._internal.processes.progress import ProgressEvent
from trainparity._internal.reports.html_views import html_fragment
from trainparity._internal.reports.notebook import NotebookProgress
from trainparity._internal.reports.text_views import text_report
from trainparity.api import Difference, ProcessResumeResult


def _failed_resume() -> ProcessResumeResult:
    tensor = Difference(
        "model.<b>weight</b>",
        "tensor_value",
        "tensor(shape=(2,), dtype=torch.float32, device=cpu, values=[1.0, 2.0])",
        "tensor(shape=(2,), dtype=torch.float32, device=cpu, values=[1.0, 2.5])",
        0.5,
        0.25,
    )
    smaller = Difference("model.bias", "tensor_value", "b", "c", 1e-6, 1e-7)
    counter = Difference("scheduler.last_epoch", "value", "4", "2")
    return ProcessResumeResult(
        outcome=Outcome.FAIL,
        message="first observed divergence at step 4: model.<b>weight</b>",
        case="cases:Faulty",
        first_divergent_step=4,
        primary_difference=tensor,
        all_differences=(tensor, smaller, counter),
        processes=(
            ExternalProcessEvidence("baseline_a", 101, 1.25, 0, None, 1.0, 0.1, 200 << 20),
            ExternalProcessEvidence("candidate_resume", 104, 0.75, 0, None, 0.5, 0.1, 190 << 20),
        ),
        fresh_resume_processes_distinct=True,
        timing_seconds={"baseline_a": 1.25, "total_wall": 4.5, "end_to_end_multiplier": 3.6},
    )


# A coverage report shaped as CONTRACT §8.1 (the coverage result type lives in its own module).
_COVERAGE_REPORT = {
    "schema_version": 2,
    "trainparity_version": "0",
    "outcome": "FAIL",
    "policy": "exactly_once",
    "message": "exactly_once policy was violated",
    "total_observations": 4,
    "unique_observed_ids": 3,
    "expected_id_count": 4,
    "missing_id_count": 1,
    "first_violation": {
        "kind": "same_rank_duplicate",
        "path": "coverage.same_rank_duplicate",
        "sample_id": 2,
        "rank": 0,
        "worker": None,
        "epoch": 0,
        "position": 3,
    },
    "anomaly_examples": [
        {
            "kind": "repeated_id+same_rank_duplicate",
            "sample_id": 2,
            "occurrence_count": 2,
            "ranks": [0],
            "workers": [],
            "epochs": [0],
        }
    ],
}


def test_repr_is_one_readable_line():
    text = repr(_failed_resume())
    assert "\n" not in text
    assert text.startswith("ProcessResumeResult(outcome=FAIL, ")
    assert "first_divergence='model.<b>weight</b>' (tensor_value)" in text
    assert "differences=3" in text
    assert "timing_seconds" not in text


def test_repr_html_shows_badge_first_divergence_phases_and_worst_tensors_escaped():
    page = _failed_resume()._repr_html_()
    assert "id='tp-outcome'" in page and ">FAIL</span>" in page
    assert "model.&lt;b&gt;weight&lt;/b&gt;" in page
    assert "<b>weight" not in page
    assert "<h3>Phases</h3>" in page and "<td>candidate_resume</td><td>104</td>" in page
    assert "<td>1.25</td>" in page
    worst = page.split("<h3>Worst tensors</h3>", 1)[1]
    assert worst.index("model.&lt;b&gt;weight") < worst.index("model.bias")
    assert "<script" not in page


def test_text_report_puts_outcome_message_and_first_divergence_first():
    lines = text_report(_failed_resume().to_dict()).splitlines()
    assert lines[0] == "FAIL: first observed divergence at step 4: model.<b>weight</b>"
    divergence = lines.index("First divergence")
    assert lines[divergence + 1].split() == ["path", "model.<b>weight</b>"]
    assert lines[divergence + 2].split() == ["reason", "tensor_value"]
    timings = lines[lines.index("Timings") :]
    assert timings[2].split() == ["total_wall", "4.50"]
    assert timings[3].split() == ["end_to_end_multiplier", "3.60x"]


def test_coverage_reports_show_the_violation_counts_and_anomalies():
    text = text_report(_COVERAGE_REPORT)
    assert text.startswith("FAIL: exactly_once policy was violated\n")
    assert ["path", "coverage.same_rank_duplicate"] in [line.split() for line in text.splitlines()]
    assert "missing id count" in text
    assert "repeated_id+same_rank_duplicate" in text
    page = html_fragment(_COVERAGE_REPORT)
    assert "<h3>First violation</h3>" in page and "<td>coverage.same_rank_duplicate</td>" in page


def test_long_tables_are_cut_with_a_count_of_hidden_rows():
    differences = [
        {"path": f"p{i}", "reason": "tensor_value", "max_abs_error": i, "max_rel_error": float(i)}
        for i in range(15)
    ]
    report = {"outcome": "FAIL", "message": "m", "all_differences": differences}
    text = text_report(report, max_rows=4)
    assert "p14" in text and "p11" in text and "p10" not in text
    assert "... 11 more" in text


def test_ranks_of_a_torchrun_phase_are_rows_under_it_and_never_cut():
    def rank(number, pid, returncode, cpu=0.5):
        return {
            "rank": number,
            "local_rank": number,
            "pid": pid,
            "returncode": returncode,
            "user_seconds": cpu,
            "system_seconds": 0.1 if cpu is not None else None,
            "peak_rss_bytes": (300 << 20) if cpu is not None else None,
            "sample_interval_seconds": 0.1,
        }

    process = {
        "phase": "baseline_a",
        "pid": 100,
        "elapsed_seconds": 5.0,
        "returncode": 1,
        "signal": None,
        "user_seconds": 2.0,
        "system_seconds": 0.5,
        "peak_rss_bytes": 200 << 20,
    }
    ranks = [rank(0, 101, None), rank(1, 102, 3), rank(2, 103, -9, cpu=None)]
    report = {
        "outcome": "ERROR",
        "message": "baseline_a child exited with status 1: rank 1 exited with code 3",
        "processes": [
            {**process, "ranks": ranks},
            *({**process, "phase": f"phase_{i}", "ranks": ranks[:2]} for i in range(3)),
        ],
    }
    lines = text_report(report, max_rows=4).splitlines()
    phases = lines[lines.index("Phases") + 1 :]
    assert phases[1].split() == ["baseline_a", "100", "1", "5.00", "2.00", "0.50", "200"]
    assert phases[2].split() == ["rank", "0", "101", "n/a", "~0.50", "~0.10", "~300"]
    assert phases[3].split() == ["rank", "1", "102", "3", "~0.50", "~0.10", "~300"]
    assert phases[4].split() == ["rank", "2", "103", "-9", "n/a", "n/a", "n/a"]
    assert phases[2].startswith("    rank 0 ")  # indented under its phase
    assert len(phases) == 1 + 4 + 3 * 3 and "more" not in "\n".join(phases)
    page = html_fragment(report)
    assert "<td>  rank 1</td><td>102</td><td>3</td><td></td><td>~0.50</td>" in page
    # Measured by a warm agent at the rank's exit (sample_interval_seconds null): no '~'.
    measured = {**rank(1, 102, 3), "sample_interval_seconds": None}
    report["processes"] = [{**process, "ranks": [measured]}]
    lines = text_report(report).splitlines()
    assert lines[lines.index("Phases") + 3].split() == [
        "rank",
        "1",
        "102",
        "3",
        "0.50",
        "0.10",
        "300",
    ]


def test_notebook_progress_updates_one_display_in_place():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    progress = NotebookProgress()
    with capture_output() as captured:
        progress(ProgressEvent("baseline_a", "start", None, 0.0))
        progress(ProgressEvent("baseline_a", "end", 1.5, 1.6))
    first, second = captured.outputs
    assert "running" in first.data["text/html"]
    assert "<td>baseline_a</td><td>done</td><td>1.50</td>" in second.data["text/html"]
    assert second.update and second.transient == first.transient


def test_notebook_progress_shows_a_note_under_the_table_not_as_a_phase():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    progress = NotebookProgress()
    with capture_output() as captured:
        progress(ProgressEvent("baseline_a", "start", None, 0.0))
        progress(ProgressEvent("", "note", None, 0.1, detail="warm mode shares no server here"))
    page = captured.outputs[-1].data["text/html"]
    assert list(progress.phases) == ["baseline_a"]
    assert page.index("<td>baseline_a</td><td>running</td>") < page.index(
        "<td>warm mode shares no server here</td>"
    )
