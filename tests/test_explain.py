"""explain: the two runs of a check that part, rerun to say why (real reruns, CPU).

tests/fixtures/noisy_training.py parts runs on purpose, each way through a real
mechanism: a 2M-element reduction split per thread (NOISY_ORDER=threads), a
sum whose order comes from os.urandom (the default), dropout drawing from an
unseeded generator (NOISY_ORDER=unseeded).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trainparity
from trainparity import Outcome
from trainparity._internal.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = "tests.fixtures.noisy_training"
# ThreadRuns to step 2: its variants part at step 1, the later steps only add compute.
THREAD_RUNS = "tests.fixtures.short_noisy_runs:ShortThreadRuns"
THREADS = {"NOISY_ORDER": "threads"}
# Each distinct environment starts a warm server that imports torch and torch._dynamo (about
# 3 s of CPU), and the worker's pool keeps only a few idle (tests/conftest.py): the tests
# below reuse a few environments, in an order that finds their servers still idle.
# MACHINE_A (one thread of NOISY_ORDER=threads) is ThreadRuns' "one", the older host's
# "native", the recorded machine A and the pair's "here".
MACHINE_A = {**THREADS, "OMP_NUM_THREADS": "1"}
# The resume checks' children, one thread each (CONTRIBUTING.md); explain's threads pin sets
# the very same values, so its reruns fork from the check's own server, and the fault and
# chain checks borrow that server too. noisy_training takes one thread where OMP_NUM_THREADS
# is unset, so its runs train as before; the verdicts below do not rest on a thread count.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def runs(tmp_path: Path, variants: dict, **options):
    return trainparity.check_runs(
        THREAD_RUNS,
        variants,
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        start="warm",
        **options,
    )


def leads(explanation) -> dict[str, str]:
    return {lead.knob: lead.status for lead in explanation.leads}


@pytest.fixture(scope="module")
def thread_runs_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """`trainparity runs` of the case's own variants (1 and 2 threads): its exit code and report.

    Run once for the two tests that explain it, through the API and through the CLI.
    """
    report = tmp_path_factory.mktemp("thread-runs") / "runs.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)  # the case imports from there, as from a user's shell
        code = main(["runs", THREAD_RUNS, "--report", str(report), "--start", "warm"])
    return code, report


def test_one_against_two_threads_is_confirmed_and_an_unread_variable_ruled_out(
    tmp_path, thread_runs_report
):
    code, report = thread_runs_report
    assert code == 1  # FAIL
    result = json.loads(report.read_text(encoding="utf-8"))
    assert result["outcome"] == "FAIL", result["message"]
    explanation = trainparity.explain(result, cwd=REPO_ROOT, temporary_root=tmp_path)
    assert explanation.outcome is Outcome.PASS, explanation.message
    # No fingerprint keeps UNREAD_SETTING: that it took is not shown, so it is not "ruled out".
    assert leads(explanation) == {"threads": "confirmed", "UNREAD_SETTING": "no effect seen"}
    assert explanation.message.startswith("the divergence is explained by threads")
    assert explanation.first_op["op"] == "aten::sum"
    assert explanation.first_op["origin"] == "born"
    assert explanation.sides == ("one_a", "two_a") and explanation.step == 1


# Next to the test above: its reruns borrow the warm servers of the same environments.
def test_max_reruns_leaves_leads_untested_and_the_cli_explains_a_report(
    tmp_path, thread_runs_report, capsys, monkeypatch
):
    code, report = thread_runs_report
    assert code == 1, report
    monkeypatch.chdir(REPO_ROOT)  # the report's case imports from there, as from a user's shell
    capsys.readouterr()
    explained = main(["explain", str(report), "--max-reruns", "1", "--json"])
    out, err = capsys.readouterr()
    assert explained == 0, err
    found = json.loads(out)
    assert [lead["status"] for lead in found["leads"]] == ["confirmed", "not tested"]
    bad = subprocess.run(
        [sys.executable, "-m", "trainparity", "explain", str(tmp_path / "missing.json")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 4


def test_an_older_hosts_dispatch_is_confirmed(tmp_path):
    variants = {
        "native": {"env": MACHINE_A},
        "old_host": {"env": {**MACHINE_A, "ATEN_CPU_CAPABILITY": "default"}},
    }
    result = runs(tmp_path / "check", variants, explain=True)
    assert result.outcome is Outcome.FAIL, result.message
    explanation = result.explanation
    assert {lead["knob"]: lead["status"] for lead in explanation["leads"]} == {
        "ATEN_CPU_CAPABILITY": "confirmed"
    }
    assert "ATEN_CPU_CAPABILITY" in explanation["message"]
    # The default dispatch already builds other initial weights: step 0, nothing to trace.
    assert explanation["step"] == 0 and explanation["first_op"] is None
    assert "before any training step" in explanation["trace_message"]


# Two machines as environments: A's (MACHINE_A: one thread, this machine's dispatch) and two
# Bs, each apart from A by one knob (B on an older host runs torch's default, non-vectorised
# kernels). The Bs are ThreadRuns' "two" and the older host's "old_host", whose warm servers
# are idle here: B with 2 threads also sets a variable the script never reads, as another
# machine's environment would, and no fingerprint keeps (so it is no knob).
MACHINES_B = {
    "OMP_NUM_THREADS": {**MACHINE_A, "OMP_NUM_THREADS": "2", "UNREAD_SETTING": "on"},
    "ATEN_CPU_CAPABILITY": {**MACHINE_A, "ATEN_CPU_CAPABILITY": "default"},
}


# A's command: ShortThreadRuns' to its step 2 (the Bs part from A at step 0, the dispatch,
# and step 1, the threads). explain_recordings reruns it in fresh interpreters.
def _recording_command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", CASES, "--run-dir", str(run_dir), "--end-step", "2", "--record"]


@pytest.fixture(scope="module")
def machine_recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A's recording and each B's ("a", then the knob B differs by), recorded side by side.

    Each machine is a variant of one runs check of the script to step 2 (ShortThreadRuns,
    whose command is _recording_command's), which keeps each run's recording in
    `recordings/<variant>_a/` of its work directory (docs/runs.md): what record() writes in
    a process, whoever started it. Its runs fork warm from the servers the tests above left
    idle, where three fresh interpreters would each import torch."""
    root = tmp_path_factory.mktemp("machines")
    machines = {"a": MACHINE_A, **MACHINES_B}
    result = trainparity.check_runs(
        THREAD_RUNS,
        {name: {"env": env} for name, env in machines.items()},
        cwd=REPO_ROOT,
        temporary_root=root,
        work_dir=root / "check",
        start="warm",
    )
    assert result.outcome is Outcome.FAIL, result.message  # each B parts from A
    recordings = {name: root / "check" / "recordings" / f"{name}_a" for name in machines}
    assert all(path.is_dir() for path in recordings.values()), recordings
    return recordings


@pytest.mark.parametrize("knob", MACHINES_B)
def test_two_recordings_from_two_machines_rerun_a_under_bs_knobs(
    tmp_path, machine_recordings, monkeypatch, knob
):
    from trainparity._internal.why.recordings import explain_recordings

    for name, setting in MACHINE_A.items():
        monkeypatch.setenv(name, setting)  # this machine is A's
    explanation = explain_recordings(
        machine_recordings["a"],
        machine_recordings[knob],
        _recording_command(tmp_path / "rerun"),
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
    )
    statuses = {lead.knob: lead.status for lead in explanation.leads}
    assert statuses[knob] == "confirmed", explanation.leads
    assert explanation.outcome is Outcome.PASS
    assert f"{knob}={MACHINES_B[knob][knob]}" in explanation.message


def test_when_no_single_knob_explains_a_pair_is_tried(tmp_path):
    """Two settings the script reads, each with an effect that does not depend on the run: the
    penalty term of NOISY_ORDER=threads (it changes every gradient from step 1 on) and the
    per-sample sum reversed (its rounding). Both sides take one thread, so no rerun's result
    varies between runs: each knob alone leaves the other's difference, the pair reproduces
    the other side bit for bit. "here" is MACHINE_A: its warm server is the tests' above."""
    here = MACHINE_A  # NOISY_ORDER=threads, one thread
    there = {"NOISY_ORDER": "fixed", "OMP_NUM_THREADS": "1", "NOISY_REVERSE": "1"}
    variants = {"here": {"env": here}, "there": {"env": there}}
    result = runs(tmp_path / "check", variants)
    assert result.outcome is Outcome.FAIL, result.message
    explanation = trainparity.explain(
        result, variants=variants, cwd=REPO_ROOT, temporary_root=tmp_path
    )
    statuses = leads(explanation)
    assert statuses["NOISY_ORDER + NOISY_REVERSE"] == "confirmed", explanation.leads
    # Each alone leaves the other's difference; no fingerprint keeps them, so never "ruled out".
    assert statuses["NOISY_ORDER"] in ("no effect seen", "partial")
    assert statuses["NOISY_REVERSE"] in ("no effect seen", "partial")
    assert "NOISY_ORDER + NOISY_REVERSE" in explanation.message


def test_repeats_of_a_random_sum_order_find_no_knob(tmp_path):
    result = trainparity.check_resume(
        f"{CASES}:NoisyCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        start="warm",
        environment=ONE_THREAD,
        explain=True,
    )
    assert result.outcome is Outcome.ABSTAIN, result.message
    explanation = result.explanation
    assert explanation["outcome"] == "ABSTAIN"
    statuses = {lead["knob"]: lead["status"] for lead in explanation["leads"]}
    # The script keeps OMP_NUM_THREADS: both fingerprints show the pinned count.
    assert statuses["threads"] == "ruled out"
    assert "CUBLAS_WORKSPACE_CONFIG" not in statuses  # a CPU run: no GPU knob is a lead
    assert explanation["message"].startswith("no knob makes the repeats agree")
    assert explanation["first_op"] is not None


# Its one rerun (max_reruns=1) pins threads to the values it already has: one server for all.
UNSEEDED = {"NOISY_ORDER": "unseeded", **ONE_THREAD}


def test_unseeded_dropout_is_named_as_an_rng_that_is_not_seeded(tmp_path):
    result = trainparity.check_resume(
        f"{CASES}:NoisyCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        start="warm",
        environment=UNSEEDED,
    )
    assert result.outcome is Outcome.ABSTAIN, result.message
    explanation = trainparity.explain(
        result,
        cwd=REPO_ROOT,
        environment=UNSEEDED,
        temporary_root=tmp_path,
        max_reruns=1,
    )
    assert "bernoulli" in explanation.first_op["op"] or "dropout" in explanation.first_op["op"]
    assert "an RNG that is not seeded" in explanation.message
    assert explanation.outcome is Outcome.PASS


@pytest.mark.parametrize(
    ("case", "first_op"),
    [
        ("RecordedOptimizerGroupMismatchCase", "aten::add_"),  # the update with the swapped lr
        ("RecordedMissingTorchCpuRngCase", "aten::rand"),  # the draw from the generator
    ],
)
def test_a_fault_seen_right_after_loading_is_traced_one_step_on(tmp_path, case, first_op):
    result = trainparity.check_resume(
        f"tests.fixtures.resume_faults:{case}",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        environment={"TRAINPARITY_DEVICE": "cpu", **ONE_THREAD},
        start="warm",
        explain=True,
    )
    assert result.outcome is Outcome.FAIL, result.message
    explanation = result.explanation
    split = result.first_divergent_step
    assert explanation["step"] == split + 1
    assert explanation["message"].startswith(
        f"right after loading, the resumed run already differs at step {split}"
    )
    # It names what the load restored wrong, as the check found it.
    first = result.primary_difference
    assert (
        f"restored ({first.path}: {first.baseline} in the uninterrupted run"
        in (explanation["message"])
    )
    assert explanation["first_op"]["op"].startswith(first_op)
    assert tuple(explanation["sides"]) == ("baseline_a", "candidate_resume")
    assert tuple(explanation["leads"]) == ()
    if first_op == "aten::rand":
        assert "the generator's state differs" in explanation["message"]


def test_a_chain_of_resumes_is_not_rerun_as_one_split(tmp_path):
    """Its later links would be rerun as a resume the check never ran: ERROR, saying so."""
    result = trainparity.check_resume(
        "tests.fixtures.chain_cases:SchedulerCounterCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        start="warm",
        environment=ONE_THREAD,
        explain=True,
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert result.explanation["outcome"] == "ERROR"
    assert "chain of resumes" in result.explanation["message"]


def test_without_records_explain_says_what_it_needs():
    with pytest.raises(ValueError, match=r"trainparity.record\(\)"):
        trainparity.explain({"case": "x:Y", "outcome": "FAIL", "trajectory": None})


def test_two_ranks_under_ddp_the_rank_that_parts_first_is_named(tmp_path):
    """recorded_job.py on 2 ranks; on resume rank 1 restores rank 0's generator."""
    result = trainparity.check_resume(
        "tests.fixtures.distributed.cases:RecordedRank1RngCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        explain=True,
    )
    assert result.outcome is Outcome.FAIL, result.message
    explanation = result.explanation
    assert explanation["rank"] == 1
    assert explanation["first_op"]["op"].startswith("aten::randn")
    assert "(rank 1, whose records part first)" in explanation["message"]


def _numpy_dispatches_avx512() -> bool:
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:
        from numpy.core import _multiarray_umath as umath
    return any(umath.__cpu_features__.get(name) for name in "AVX512_SKX AVX512_ICL".split())


@pytest.mark.skipif(
    not _numpy_dispatches_avx512(),
    reason="NumPy runs no AVX-512 kernels on this CPU: float32 arctan rounds alike either way",
)
def test_the_seeds_numpy_story_is_confirmed_and_inherited_from_the_input(tmp_path):
    result = trainparity.check_runs(
        f"{CASES}:NumpyRuns", cwd=REPO_ROOT, temporary_root=tmp_path, start="warm", explain=True
    )
    assert result.outcome is Outcome.FAIL, result.message
    explanation = result.explanation
    assert {lead["knob"]: lead["status"] for lead in explanation["leads"]} == {
        "NPY_DISABLE_CPU_FEATURES": "confirmed"
    }
    assert explanation["first_op"]["origin"] == "inherited"
    assert "NPY_DISABLE_CPU_FEATURES" in explanation["message"]
