"""explain reruns the case the check ran, whatever form it took: a CommandCase or a class by value.

Issue 53, finding 3: `explain(result)` on a check made with a CommandCase read
the report's `case` (the template as a shell shows it) as a spec and raised
CaseImportError; a class sent by value could not be rerun without passing it
again. The result keeps the case the check was given, and a CommandCase's
report keeps its fields (`command_case`), so `trainparity explain REPORT.json`
reruns the same command.
"""

from __future__ import annotations

import json
from pathlib import Path

import trainparity
from trainparity import Outcome
from trainparity._internal.cases.command_case import CommandCase
from trainparity._internal.cli.common import EXIT_CODES
from trainparity._internal.cli.main import main

from tests.fixtures.runs_cases import RECORDED_TOY, RecordedToyRuns

REPO_ROOT = Path(__file__).resolve().parents[1]
# The second variant adds 1e-3 to the weight after step 2: the runs part at step 2.
VARIANTS = {"plain": {}, "nudged": {"args": ["--nudge-at", "2"]}}


def _command_case() -> CommandCase:
    return CommandCase(
        template=[
            "python",
            RECORDED_TOY,
            "--checkpoint",
            "{checkpoint}",
            "--end-step",
            "{end_step}",
        ],
        checkpoint="{run_dir}/model.pt",
        total_step=3,
    )


def _check(case, tmp_path: Path, **options):
    result = trainparity.check_runs(
        case, VARIANTS, cwd=REPO_ROOT, temporary_root=tmp_path, timeout=120, **options
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == 2
    return result


def _explains_the_nudge(explanation) -> None:
    """The sides were rerun with their own arguments, and parted again at step 2."""
    assert explanation.outcome is not Outcome.ERROR, explanation.message
    assert explanation.step == 2 and explanation.sides == ("plain_a", "nudged_a")
    assert explanation.reruns >= 2
    # Rerun without the variant's arguments, the runs would not part ("did not reproduce").
    assert "did not reproduce" not in explanation.message
    assert "the variant's arguments" in explanation.message, explanation.message


def test_a_command_case_check_is_explained_by_rerunning_its_command(tmp_path, monkeypatch, capsys):
    result = _check(_command_case(), tmp_path / "check", report_path=tmp_path / "runs.json")
    report = json.loads((tmp_path / "runs.json").read_text(encoding="utf-8"))
    assert CommandCase(**report["command_case"]) == _command_case()
    # Issue 53, finding 7: the report previews the elements around the first that differs.
    assert [(window["path"], window["index"]) for window in report["value_windows"]] == [
        ("model.weight", 0)
    ]
    _explains_the_nudge(
        trainparity.explain(result, cwd=REPO_ROOT, temporary_root=tmp_path / "explain")
    )
    # The command line reruns it from the report alone. Its entry point, in this process: its
    # reruns borrow the warm server the check left idle, where `python -m trainparity` would
    # start its own (tests/test_explain.py runs that entry point as a process).
    monkeypatch.chdir(REPO_ROOT)  # as from a user's shell
    capsys.readouterr()
    code = main(["explain", str(tmp_path / "runs.json"), "--json"])
    out, err = capsys.readouterr()
    explained = json.loads(out)
    assert code == EXIT_CODES[Outcome(explained["outcome"])] != 3, (explained, err)
    assert (explained["step"], explained["sides"]) == (2, ["plain_a", "nudged_a"])
    assert "the variant's arguments" in explained["message"], explained["message"]


def test_a_class_sent_by_value_is_explained_without_passing_it_again(tmp_path):
    class ThreeSteps(RecordedToyRuns):  # defined in a function: it goes by value
        total_step = 3

    result = _check(ThreeSteps, tmp_path / "check")
    assert result.case.startswith("<by value> ")
    _explains_the_nudge(
        trainparity.explain(result, cwd=REPO_ROOT, temporary_root=tmp_path / "explain")
    )
