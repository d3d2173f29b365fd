"""Terminal safety: recorded keys, paths and values cannot forge or restyle printed lines."""

from __future__ import annotations

import json
import re

import numpy
import pytest
import torch
from trainparity import Outcome
from trainparity._internal.cli.main import main
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.processes.progress import ProgressEvent, ProgressReporter
from trainparity._internal.reports.terminal_text import printable
from trainparity._internal.state.paths import render_path
from trainparity._internal.state.snapshot_file import write_snapshot
from trainparity.testing import assert_parity

FORGED = "PASS: all equal"
# A newline that would start a forged verdict line, ESC sequences (clear screen, red),
# a carriage return, the 8-bit CSI (C1) and a bidi override that reverses what follows.
HOSTILE = f"\x1b[2J\x1b[31ma\n{FORGED}\rb\x9b31m\u202e"
_RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _assert_terminal_safe(text: str) -> None:
    assert not _RAW_CONTROL.search(text), repr(text)
    assert not any(line.lstrip().startswith(FORGED) for line in text.splitlines()), text


def test_printable_escapes_controls_and_keeps_ordinary_text():
    assert printable("a\nb\rc\td\x00e\x1b[2J\x7f\x9b\u2028\u202e") == (
        "a\\nb\\rc\\td\\x00e\\x1b[2J\\x7f\\x9b\\u2028\\u202e"
    )
    ordinary = "model.layer[2].weight ünïcödé 重み 🙂 C:\\path"
    assert printable(ordinary) == ordinary
    assert printable(3) == "3"


def _hostile_pair(tmp_path):
    baseline = tmp_path / f"base{HOSTILE}.safetensors"
    candidate = tmp_path / f"cand{HOSTILE}.safetensors"
    write_snapshot(baseline, {HOSTILE: torch.ones(2), "text": HOSTILE, "k": {HOSTILE: 1}})
    write_snapshot(candidate, {HOSTILE: torch.zeros(2), "text": "x", "k": {HOSTILE: 2}})
    return baseline, candidate


def test_cli_diff_text_escapes_hostile_keys_and_paths_but_json_stays_exact(capsys, tmp_path):
    baseline, candidate = _hostile_pair(tmp_path)
    assert main(["diff", str(baseline), str(candidate)]) == 1
    out, err = capsys.readouterr()
    _assert_terminal_safe(out)
    _assert_terminal_safe(err)
    assert "\\x1b[2J" in out and "\\x9b31m" in out  # shown, escaped, in the summary

    assert main(["diff", str(baseline), str(candidate), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"] == str(baseline)  # the data itself is not altered
    assert render_path((HOSTILE,)) in [item["path"] for item in report["all_differences"]]


def test_cli_error_lines_escape_paths_from_arguments(capsys, tmp_path):
    missing = tmp_path / f"missing{HOSTILE}"
    assert main(["diff", str(missing), str(missing)]) == 3
    out, err = capsys.readouterr()
    _assert_terminal_safe(out)
    assert main(["diff", "a", "b", f"--bogus{HOSTILE}"]) == 4
    out, err = capsys.readouterr()
    _assert_terminal_safe(err)
    assert "unrecognized arguments: --bogus\\x1b[2J" in err
    coverage = ["coverage", "--ids", f"0={missing}", "--policy", "exactly_once", "--universe", "2"]
    assert main(coverage) == 3
    _assert_terminal_safe(capsys.readouterr().out)
    no_colon = HOSTILE.replace(":", "")  # --call MODULE:CALLABLE without the colon
    assert main(["snapshot", "--call", no_colon, "-o", str(missing)]) == 4
    _assert_terminal_safe(capsys.readouterr().err)
    assert main(["snapshot", "--call", f"x{HOSTILE}", "-o", str(missing)]) == 3
    _assert_terminal_safe(capsys.readouterr().out)
    assert main(["diff", "a", "b", "--report", str(missing / "sub" / "r.json")]) in (0, 1, 2, 3)
    _assert_terminal_safe(capsys.readouterr().err)


def test_cli_snapshot_and_coverage_text_escape_hostile_paths(capsys, tmp_path):
    checkpoint = tmp_path / f"ckpt{HOSTILE}.pt"
    torch.save({"w": torch.ones(2)}, checkpoint)
    output = tmp_path / f"out{HOSTILE}.safetensors"
    assert main(["snapshot", "--checkpoint", str(checkpoint), "-o", str(output)]) == 0
    _assert_terminal_safe(capsys.readouterr().out)
    ids = tmp_path / f"ids{HOSTILE}.npy"
    numpy.save(ids, numpy.array([0, 1, 1], dtype="<i8"))
    evidence = tmp_path / f"evidence{HOSTILE}.json"
    argv = ["coverage", "--ids", f"0={ids}", "--policy", "exactly_once", "--universe", "3"]
    assert main([*argv, "--evidence", str(evidence)]) == 1
    out, err = capsys.readouterr()
    _assert_terminal_safe(out)
    _assert_terminal_safe(err)


def test_cli_env_escapes_hostile_environment_values(capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", HOSTILE)
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    _assert_terminal_safe(out)
    assert "variables.OMP_NUM_THREADS" in out
    assert main(["env", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["environment"]["variables"]["OMP_NUM_THREADS"] == HOSTILE


def test_progress_lines_are_one_escaped_line(capsys):
    reporter = ProgressReporter(True)
    reporter.event(HOSTILE, "start")
    reporter.event(HOSTILE, "end", 1.5)
    err = capsys.readouterr().err
    _assert_terminal_safe(err)
    assert len(err.splitlines()) == 2


def test_result_reprs_escape_hostile_text(tmp_path):
    baseline, candidate = _hostile_pair(tmp_path)
    failed = diff_snapshots(baseline, candidate)
    assert failed.outcome == "FAIL" and HOSTILE in failed.baseline
    _assert_terminal_safe(repr(failed))
    corrupt = tmp_path / f"corrupt{HOSTILE}"
    corrupt.write_bytes(b"\x00" * 4)
    broken = diff_snapshots(corrupt, candidate)
    assert broken.outcome == "ERROR" and HOSTILE in broken.message
    _assert_terminal_safe(repr(broken))


def test_event_objects_keep_their_data():
    event = ProgressEvent(HOSTILE, "start", None, 0.0)
    assert event.phase == HOSTILE  # only rendering escapes; callbacks see the real phase


def test_assert_parity_and_the_pytest_explanation_escape_state_paths(tmp_path):
    with pytest.raises(AssertionError) as raised:
        assert_parity({HOSTILE: torch.ones(2)}, {HOSTILE: torch.zeros(2)}, msg="mine\nkept")
    message = str(raised.value)
    assert message.startswith("mine\nkept\n")  # the caller's own msg is left as given
    _assert_terminal_safe(message.removeprefix("mine\nkept\n"))

    result = diff_snapshots(*_hostile_pair(tmp_path))
    with pytest.raises(AssertionError) as explained:  # pytest's rewritten assert calls the plugin
        assert result.outcome is Outcome.PASS
    explanation = str(explained.value)
    assert "first divergence:" in explanation
    _assert_terminal_safe(explanation)
