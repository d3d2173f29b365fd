"""Warm mode without PYTHONHASHSEED shares no server, and says so once (issue 42, finding 9).

A forked child keeps its server's str hashes, so a phase that draws its own
hash seed gets a server of its own, which imports torch for that phase alone.
The progress output and the text report say it plainly, once.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainparity import Outcome, check_resume
from trainparity._internal.cases.command_case import CommandCase
from trainparity._internal.reports.text_views import text_report

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "cosine_schedule_train.py"
CASE = CommandCase(
    template=[
        sys.executable,
        str(SCRIPT),
        "--checkpoint",
        "{checkpoint}",
        "--end-step",
        "{end_step}",
        "--resume-from",
        "{resume_from?}",
        "--t-max",
        "4",
    ],
    checkpoint="{run_dir}/ck.pt",
    split_step=2,
    total_step=4,
)
SAID = (
    "warm mode shares no server here: PYTHONHASHSEED is not set, so each phase is forked from "
    "a server of its own, which imports torch for that phase alone (a forked child keeps its "
    "server's str hashes, and each phase must draw its own, as a fresh process does); set "
    "PYTHONHASHSEED=0 in the phases' environment (export it, or environment=) for them to "
    "share one server that imports torch once"
)


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


def test_warm_without_a_hash_seed_says_once_that_no_phase_shares_a_server_and_why(
    tmp_path, monkeypatch, capfd
):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    result = check_resume(CASE, start="warm", progress=True, temporary_root=tmp_path, timeout=120)
    assert result.outcome is Outcome.PASS, result.message
    progress = capfd.readouterr().err.splitlines()
    assert [line for line in progress if "shares no server" in line] == [f"trainparity: {SAID}"]
    start = result.environment["child_start"]
    assert start["unshared"] == SAID
    assert {"baseline_a", "baseline_b", "candidate_split"} <= set(start["warm"])
    lines = _lines(text_report(result.to_dict()))
    assert [line for line in lines if "shares no server" in line] == [f"warm start {SAID}"]


def test_warm_with_a_hash_seed_shares_a_server_and_says_nothing_of_the_kind(
    tmp_path, monkeypatch, capfd
):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    result = check_resume(
        CASE,
        start="warm",
        progress=True,
        temporary_root=tmp_path,
        timeout=120,
        environment={"PYTHONHASHSEED": "0"},
    )
    assert result.outcome is Outcome.PASS, result.message
    assert "shares no server" not in capfd.readouterr().err
    start = result.environment["child_start"]
    assert "unshared" not in start and "candidate_resume" in start["warm"]
    assert "warm start" not in text_report(result.to_dict())
