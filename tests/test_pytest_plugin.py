"""The pytest plugin, run inside pytester sessions: work-dir fixture, assertion messages, marker."""

from __future__ import annotations

from importlib import metadata

pytest_plugins = ["pytester"]

_FAILING_RESUME_RESULT = """
from trainparity import Outcome
from trainparity.api import Difference, ProcessResumeResult

def faulty_result():
    first = Difference("scheduler.last_epoch", "value", "4", "2")
    return ProcessResumeResult(
        outcome=Outcome.FAIL,
        message="first observed divergence at step 4: scheduler.last_epoch",
        case="cases:Faulty",
        first_divergent_step=4,
        primary_difference=first,
        all_differences=(first,),
    )
"""


def test_the_plugin_is_registered_through_the_pytest11_entry_point():
    entry_points = metadata.entry_points(group="pytest11")
    assert any(
        entry.name == "trainparity" and entry.value == "trainparity.pytest_plugin"
        for entry in entry_points
    )


def test_the_trainparity_marker_is_registered(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.trainparity
        def test_marked():
            pass
        """
    )
    result = pytester.runpytest("--strict-markers", "-m", "trainparity")
    result.assert_outcomes(passed=1)
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.trainparity:*training processes*"])


def test_assert_on_outcome_prints_outcome_message_first_divergence_and_logs(pytester):
    pytester.makepyfile(helpers=_FAILING_RESUME_RESULT)
    pytester.makepyfile(
        """
        from helpers import faulty_result
        from trainparity import Outcome

        def test_resume(trainparity_workdir):
            (trainparity_workdir / "baseline_a").mkdir()
            (trainparity_workdir / "baseline_a" / "stderr.log").write_text("boom")
            result = faulty_result()
            assert result.outcome is Outcome.PASS
        """
    )
    result = pytester.runpytest("-vv")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*assert FAIL is PASS",
            "*ProcessResumeResult: FAIL: first observed divergence at step 4: scheduler.last_epoch",
            "*first divergence: scheduler.last_epoch (value)",
            "*baseline:  4",
            "*candidate: 2",
            "*run logs in *trainparity-test_resume*: baseline_a/stderr.log",
        ]
    )


def test_equality_with_the_outcome_string_is_explained_too(pytester):
    pytester.makepyfile(helpers=_FAILING_RESUME_RESULT)
    pytester.makepyfile(
        """
        from helpers import faulty_result

        def test_resume():
            result = faulty_result()
            assert result.outcome == "PASS"
        """
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(
        ["*assert FAIL == PASS", "*first divergence: scheduler.last_epoch (value)"]
    )


def test_the_workdir_is_kept_and_named_when_the_test_fails(pytester):
    pytester.makepyfile(
        """
        import pathlib

        def test_fails(trainparity_workdir):
            (trainparity_workdir / "stderr.log").write_text("child output")
            pathlib.Path("workdir.txt").write_text(str(trainparity_workdir))
            assert False
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    kept = (pytester.path / "workdir.txt").read_text()
    result.stdout.fnmatch_lines(["*trainparity*", f"run logs kept in {kept}"])
    assert (pytester.path / kept / "stderr.log").read_text() == "child output"


def test_the_workdir_is_removed_when_the_test_passes(pytester):
    pytester.makepyfile(
        """
        import pathlib

        def test_passes(trainparity_workdir):
            assert trainparity_workdir.is_dir()
            (trainparity_workdir / "stderr.log").write_text("child output")
            pathlib.Path("workdir.txt").write_text(str(trainparity_workdir))
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    kept = (pytester.path / "workdir.txt").read_text()
    assert not (pytester.path / kept).exists()
    assert "run logs kept" not in result.stdout.str()


def test_unrelated_outcome_comparisons_keep_pytest_s_own_message(pytester):
    pytester.makepyfile(
        """
        from trainparity import Outcome

        def test_plain():
            outcome = Outcome.ERROR
            assert outcome is Outcome.PASS
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert "first divergence" not in result.stdout.str()
