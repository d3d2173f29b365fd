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
            "*first divergence at step 4: scheduler.last_epoch (value): 4 in the baseline, 2 in "
            "the candidate",
            "*ProcessResumeResult: FAIL: first observed divergence at step 4: scheduler.last_epoch",
            "*run logs in *trainparity-test_resume*: baseline_a/stderr.log",
        ]
    )


# An ABSTAIN with a long message whose tensor differs past its first four elements: the
# summaries preview four equal zeros, the window holds the elements that differ.
_LONG_TENSOR_RESULT = """
from trainparity import Outcome
from trainparity.api import Difference, ProcessResumeResult
from trainparity._internal.comparison.windows import ValueWindow

ZEROS = "tensor(shape=(1, 8), dtype=torch.float32, device=cpu, values=[0.0, 0.0, 0.0, 0.0])"

def abstained():
    first = Difference("model.weight", "tensor_value", ZEROS, ZEROS, 0.5, 0.2)
    return ProcessResumeResult(
        outcome=Outcome.ABSTAIN,
        message="candidate_split differs from baseline_a at step 3 (model.weight), before its "
        "save at step 4: up to the split it is one more uninterrupted run, so training is not "
        "deterministic there and resume attribution is unsafe",
        case="cases:Wide",
        first_divergent_step=3,
        primary_difference=first,
        all_differences=(first,),
        value_windows=(
            ValueWindow("model.weight", 5, 3, (0.0, 0.0, 2.0, 3.0, 4.0), (0.0, 0.0, 2.5, 3.0, 4.0)),
        ),
    )
"""


def test_without_vv_the_kept_lines_say_where_and_what_differs(pytester, monkeypatch):
    # Issue 53, finding 7: pytest keeps about 8 lines or 640 characters of an assertion's
    # explanation (not on CI); the finding must come within them. A subprocess: a run of its
    # own, with the environment of a developer's terminal.
    for variable in ("CI", "BUILD_NUMBER"):
        monkeypatch.delenv(variable, raising=False)
    pytester.makepyfile(helpers=_LONG_TENSOR_RESULT)
    pytester.makepyfile(
        """
        from helpers import abstained
        from trainparity import Outcome

        def test_resume():
            result = abstained()
            assert result.outcome is Outcome.PASS
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*assert ABSTAIN is PASS",
            "*first divergence at step 3: model.weight (tensor_value): element 5 (flat) is 2.0 in "
            "the baseline, 2.5 in the candidate; max abs error 0.5",
            "*ProcessResumeResult: ABSTAIN: candidate_split differs*",
            "*...Full output truncated*",
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
        ["*assert FAIL == PASS", "*first divergence at step 4: scheduler.last_epoch (value):*"]
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
