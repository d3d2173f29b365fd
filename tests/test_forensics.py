"""Op-level forensics: trace() captures a step; diff_traces finds where two runs part, born or inherited."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import trainparity
from trainparity import Outcome, ToleranceComparison
from trainparity._internal.cli.main import main as cli_main
from trainparity._internal.state.snapshot_file import SnapshotFileError
from trainparity._internal.why.forensics import diff_traces, read_trace
from trainparity._internal.why.forensics.capture import debug_mode_available
from trainparity._internal.why.forensics.leads import op_kind

from tests.few_at_a_time import run_a_few_at_a_time
from tests.fixtures.forensics_step import traced_step

STEP_SCRIPT = Path(__file__).resolve().parent / "fixtures" / "forensics_step.py"
REPOSITORY = STEP_SCRIPT.parents[2]
# NumPy's AVX-512 dispatch targets; disabling them sends float32 arctan to its AVX2 kernel.
NUMPY_AVX512_TARGETS = "X86_V4 AVX512_SKX AVX512_ICL AVX512_SPR"


def _in_subprocesses(tmp_path, runs):
    """Run forensics_step.py once per (name, arguments, extra environment), concurrently."""
    processes = []
    for name, arguments, variables in runs:
        path = tmp_path / f"{name}.trace"
        environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), **variables}
        command = [sys.executable, str(STEP_SCRIPT), str(path), *arguments]
        processes.append((subprocess.Popen(command, env=environment, stderr=subprocess.PIPE), path))
    paths = []
    for process, path in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr.decode(errors="replace")[-2000:]
        paths.append(path)
    return paths


def _in_this_process(tmp_path, name, scenario, threads=1):
    """forensics_step.py's step traced in this process (which already imported torch).

    One side of a subprocess pair: a child costs an interpreter and torch's import, several
    times the step itself. The trace records the same fingerprint either way (the variables
    are this process's, which the children inherit), so only what the pair varies differs.
    """
    path = tmp_path / f"{name}.trace"
    previous = torch.get_num_threads()
    try:
        traced_step(str(path), scenario, threads=threads)
    finally:
        torch.set_num_threads(previous)
    return path


@pytest.fixture(scope="module")
def float32_trace(tmp_path_factory):
    threads = torch.get_num_threads()
    try:
        yield traced_step(str(tmp_path_factory.mktemp("f32") / "a.trace"), "reduction")
    finally:
        torch.set_num_threads(threads)


# Born: a reduction rounds differently on 1 and 2 threads ------------------------------


def test_thread_count_divergence_is_born_in_the_reduction_with_the_thread_lead(
    tmp_path, monkeypatch
):
    # One thread here, two in a child: the child inherits this environment but for the variable.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one = _in_this_process(tmp_path, "threads1", "reduction", threads=1)
    (two,) = _in_subprocesses(
        tmp_path, [("threads2", ["reduction", "--threads", "2"], {"OMP_NUM_THREADS": "2"})]
    )
    diff = diff_traces(one, two)

    assert diff.outcome is Outcome.FAIL, diff.message
    first = diff.first_divergence
    # Which of the head's three reductions rounds differently first depends on the data.
    assert first["op"] in ("aten::mean", "aten::sum")
    assert (first["module"], first["phase"]) == ("head", "forward")
    assert first["origin"] == "born"
    assert first["op_kind"] == "reduction" and diff.leads_ranked_for == "reduction"
    assert diff.message == (
        f"first divergence at {first['op']} in head (forward, call {first['call_index']}): "
        "born there (its inputs are bit-identical)"
    )
    # Everything before it (the matmul, exp, ...) agrees bit for bit.
    assert diff.error_growth[0][0] == first["position"] >= 3
    assert 0 < first["relative_error"] < 1e-5
    assert diff.environment_leads[0].category == "threads"
    assert {lead.key for lead in diff.environment_leads[:2]} == {
        "threads.torch_intra_op",
        "variables.OMP_NUM_THREADS",
    }
    assert f"{first['op']} is a reduction" in diff.environment_leads[0].note
    report = diff.to_dict()
    assert report["first_divergence"]["origin"] == "born"
    html = diff._repr_html_()
    assert "<svg" in html and "tp-first-divergence" in html and "<script" not in html


# Inherited: the batch was built on the host by NumPy's SIMD kernels --------------------


def _numpy_dispatches_avx512() -> bool:
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:
        from numpy.core import _multiarray_umath as umath
    features = umath.__cpu_features__
    return any(features.get(name) for name in NUMPY_AVX512_TARGETS.split())


@pytest.mark.skipif(
    not _numpy_dispatches_avx512(),
    reason="NumPy runs no AVX-512 kernels on this CPU: float32 arctan rounds alike either way",
)
def test_numpy_simd_divergence_is_inherited_from_the_batch_with_the_numpy_lead(tmp_path):
    # NumPy's default dispatch here; a child restricts it (read when NumPy is imported).
    default = _in_this_process(tmp_path, "default", "numpy")
    (restricted,) = _in_subprocesses(
        tmp_path,
        [("no-avx512", ["numpy"], {"NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512_TARGETS})],
    )
    diff = diff_traces(default, restricted)

    assert diff.outcome is Outcome.FAIL, diff.message
    first = diff.first_divergence
    assert (first["op"], first["module"], first["phase"]) == ("aten::addmm", "proj", "forward")
    assert first["origin"] == "inherited"
    assert first["inherited_from_name"] == "batch"
    assert diff.message.startswith(
        "first divergence at aten::addmm in proj (forward, call 0): inherited from batch "
        "(4096x16 float32"
    )
    assert diff.leads_ranked_for == "input"
    leading = [lead.key for lead in diff.environment_leads[:2]]
    assert leading == ["numpy.simd_dispatched", "variables.NPY_DISABLE_CPU_FEATURES"]
    assert "NumPy" in diff.environment_leads[0].note


# In-process scenarios ------------------------------------------------------------------


def test_float32_against_float64_is_inherited_from_a_parameter_whose_dtype_differs(
    float32_trace, tmp_path
):
    float64 = traced_step(str(tmp_path / "b.trace"), "float64")
    diff = diff_traces(float32_trace.path, float64.path)

    assert diff.outcome is Outcome.FAIL
    first = diff.first_divergence
    assert (first["op"], first["module"], first["reason"]) == ("aten::addmm", "proj", "dtype")
    assert first["origin"] == "inherited"
    assert first["inherited_from_name"] == "proj.bias"  # addmm(bias, batch, weight.t())
    assert "its dtype differ" in first["inherited_from"]


def test_identical_runs_have_no_divergence(float32_trace, tmp_path):
    again = traced_step(str(tmp_path / "again.trace"), "reduction")
    diff = diff_traces(float32_trace.path, again.path)

    assert diff.outcome is Outcome.PASS, diff.message
    assert diff.message.startswith("the traces agree: ")
    assert diff.message.endswith(" ops compared, no output differs")
    assert diff.differing_op_count == 0 and diff.first_divergence is None
    assert diff.environment_leads == ()


def test_an_op_found_in_one_trace_only_is_reported_and_skipped(float32_trace, tmp_path):
    extra = traced_step(str(tmp_path / "extra.trace"), "extra-op")
    diff = diff_traces(float32_trace.path, extra.path)

    assert diff.outcome is Outcome.PASS, diff.message
    assert len(extra.ops) == len(float32_trace.ops) + 1
    assert diff.only_in_candidate == ("aten::clone in (top level) (forward, call 0)",)
    assert diff.only_in_baseline == ()
    assert diff.message.endswith("1 op(s) found in one trace only were skipped")
    reverse = diff_traces(extra.path, float32_trace.path)
    assert reverse.outcome is Outcome.PASS and len(reverse.only_in_baseline) == 1


def test_a_tolerance_needs_kept_values_to_pass_a_difference_the_summaries_cannot_decide():
    # Every op is kept (""), not only the reductions in `head`: which other ops round
    # differently with 2 threads (the projection's matmuls, the optimizer's update)
    # depends on the machine and its load, and an unkept one would leave it ABSTAIN.
    threads = torch.get_num_threads()
    try:
        one = traced_step(None, "reduction", threads=1, keep=("",))
        two = traced_step(None, "reduction", threads=2, keep=("",))
        unkept = traced_step(None, "reduction", threads=2)
    finally:
        torch.set_num_threads(threads)
    exact = diff_traces(one, two)
    if exact.outcome is Outcome.PASS:
        pytest.skip("1 and 2 threads round this mean alike on this machine")
    loose = ToleranceComparison(rtol=1e-3, atol=0.0)
    assert diff_traces(one, two, comparison=loose).outcome is Outcome.PASS
    assert exact.first_divergence["relative_error_is_exact"]
    undecided = diff_traces(one, unkept, comparison=loose)
    assert undecided.outcome is Outcome.ABSTAIN
    assert "keep=" in undecided.message
    strict = diff_traces(one, unkept, comparison=ToleranceComparison(rtol=1e-12, atol=0.0))
    assert strict.outcome is Outcome.FAIL, "a 1e-7 change of a scalar proves rtol 1e-12 broken"


# What a trace holds ----------------------------------------------------------------------


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.fc2 = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _tiny_step(capture: str):
    torch.manual_seed(1)
    model = torch.nn.Sequential(_Block())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    batch = torch.randn(5, 3)

    def step():
        model(batch).sum().backward()
        optimizer.step()

    before = model[0].fc1.weight.detach().clone()
    trace = trainparity.trace(
        model=model, inputs={"x": batch}, keep=("0.fc2",), capture=capture, run=step
    )
    return trace, before, model


@pytest.mark.parametrize("capture", ["DebugMode", "TorchDispatchMode"])
def test_a_trace_has_module_paths_forward_and_backward_and_named_leaves(capture):
    if capture == "DebugMode" and not debug_mode_available():
        pytest.skip("DebugMode needs torch >= 2.10")
    trace, before, model = _tiny_step(capture)
    keys = [(op.name, op.module, op.phase) for op in trace.ops]
    assert ("aten::addmm", "0.fc1", "forward") in keys
    assert ("aten::relu", "0", "forward") in keys
    assert ("aten::mm", "0.fc2", "backward") in keys
    assert ("aten::threshold_backward", "0", "backward") in keys
    assert ("aten::mm", "0.fc1", "backward") in keys
    updates = [op for op in trace.ops if op.name == "aten::add_.Tensor"]
    assert updates and all(op.phase == "other" and op.module == "" for op in updates)
    names = {value.name for value in trace.values if value.kind == "leaf"}
    assert {"0.fc1.weight", "0.fc1.bias", "0.fc2.weight", "0.fc2.bias", "x"} <= names
    # The in-place update read the weight as it was before the step, and wrote the new one.
    weight = next(v for v in trace.values if v.name == "0.fc1.weight")
    from trainparity._internal.why.forensics.capture import measure_tensor

    assert weight.digest == measure_tensor(before).digest
    update = next(op for op in updates if op.inputs[0] == weight.index)
    written = trace.values[update.outputs[0]]
    assert written.digest == measure_tensor(model[0].fc1.weight).digest
    assert written.sum == pytest.approx(
        float(model[0].fc1.weight.detach().double().sum()), rel=1e-12
    )
    # Only fc2's op outputs are kept whole.
    kept_ops = {trace.ops[trace.values[index].producer].module for index in trace.kept}
    assert kept_ops == {"0.fc2"}
    assert all(trace.values[index].kind == "output" for index in trace.kept)


def test_both_captures_record_the_same_ops_and_digests():
    if not debug_mode_available():
        pytest.skip("DebugMode needs torch >= 2.10")
    debug, _, _ = _tiny_step("DebugMode")
    plain, _, _ = _tiny_step("TorchDispatchMode")

    # DebugMode does not pass some aten::detach calls (aliases) to its hooks; every
    # computing op is seen by both, with the same digests.
    def computing(trace):
        return [
            (op.key, [trace.values[index].digest for index in op.outputs])
            for op in trace.ops
            if op.name != "aten::detach"
        ]

    assert computing(debug) == computing(plain)
    diff = diff_traces(debug, plain)
    assert diff.outcome is Outcome.PASS
    assert {label.split(" in ")[0] for label in diff.only_in_candidate} <= {"aten::detach"}


def test_a_trace_file_reads_back_verified_and_a_flipped_byte_is_an_error(tmp_path):
    trace, _, _ = _tiny_step("auto")
    path = tmp_path / "tiny.trace"
    trainparity._internal.why.forensics.write_trace(path, trace)
    back = read_trace(path)
    assert [op.key for op in back.ops] == [op.key for op in trace.ops]
    assert [(v.kind, v.digest, v.shape, v.name) for v in back.values] == [
        (v.kind, v.digest, v.shape, v.name) for v in trace.values
    ]
    assert set(back.kept) == set(trace.kept)
    assert back.environment == trace.environment
    assert diff_traces(trace, path).outcome is Outcome.PASS

    data = bytearray(path.read_bytes())
    data[-5] ^= 0x10
    damaged = tmp_path / "damaged.trace"
    damaged.write_bytes(bytes(data))
    with pytest.raises(SnapshotFileError, match="damaged"):
        read_trace(damaged)
    result = diff_traces(path, damaged)
    assert result.outcome is Outcome.ERROR and "damaged" in result.message


def test_op_kinds():
    assert op_kind("aten::sum.dim_IntList") == "reduction"
    assert op_kind("aten::_log_softmax") == "reduction"
    assert op_kind("aten::addmm") == "matmul"
    assert op_kind("aten::native_dropout") == "random"
    assert op_kind("aten::mul.Tensor") == "elementwise"


def test_trace_argument_errors():
    with pytest.raises(ValueError, match="capture must be one of"):
        trainparity.trace(capture="fast")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        trainparity.trace(model="net")
    with pytest.raises(TypeError, match="keep must be an iterable of module paths"):
        trainparity.trace(keep="fc1")
    with pytest.raises(TypeError, match="must be a tensor"):
        trainparity.trace(inputs={"x": np.zeros(2)})


# CLI ---------------------------------------------------------------------------------------

_TRAIN_SCRIPT = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).square().mean().backward()
    optimizer.step()
"""


def test_cli_traces_step_two_of_an_unmodified_script_and_diffs_traces(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(_TRAIN_SCRIPT)
    outputs = {}
    for step in (2, 3):
        outputs[step] = tmp_path / f"step{step}.trace"
        code = cli_main(
            ["trace", "--step", str(step), "--output", str(outputs[step]), "--",
             sys.executable, str(script)]
        )  # fmt: skip
        assert code == 0, capsys.readouterr().err
    traced = read_trace(outputs[2])
    assert traced.step == 2
    names = [op.name for op in traced.ops]
    # Step 2: zero_grad, a forward, a backward and the SGD update of 4 parameters.
    assert names.count("aten::addmm") == 2 and names.count("aten::add_.Tensor") == 4
    assert {op.module for op in traced.ops if op.phase == "forward"} == {"0", "1", "2"}
    capsys.readouterr()
    assert cli_main(["diff", str(outputs[2]), str(outputs[2])]) == 0
    assert "the traces agree" in capsys.readouterr().out
    # Step 3 starts from other weights and another batch: the first op already differs.
    report = tmp_path / "report.html"
    assert cli_main(["diff", str(outputs[2]), str(outputs[3]), "--report", str(report)]) == 1
    assert "first divergence at" in capsys.readouterr().out
    assert "<svg" in report.read_text()
    snapshot = tmp_path / "state.safetensors"
    trainparity._internal.state.snapshot_file.write_snapshot(snapshot, {"w": torch.ones(2)})
    assert cli_main(["diff", str(outputs[2]), str(snapshot)]) == 4
    assert "is a trace but" in capsys.readouterr().err
    assert cli_main(["trace", "--output", str(tmp_path / "x.trace"), "--", "bash", "x"]) == 4
    late = ["trace", "--step", "9", "--output", str(tmp_path / "late.trace"), "--"]
    assert cli_main([*late, sys.executable, str(script)]) == 3
    assert "step 9 never ended" in capsys.readouterr().err


# Step boundaries from record() ------------------------------------------------------------

_RECORDING_SCRIPT = """\
import torch
import trainparity

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
FIRST = 0  # the step of the first record()
if FIRST == 0:
    trainparity.record(0, {"model": model.state_dict()})
for step in range(1, 5):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).square().mean().backward()
    optimizer.step()
    with torch.no_grad():  # a probe after the update: still step `step` under record() boundaries
        model(torch.full((3, 4), float(step)))
    trainparity.record(step, {"model": model.state_dict()})
"""


def _run_traced(script, step, output, **variables):
    """`python script` with TRAINPARITY_TRACE_STEP set by hand (no `trainparity trace`).

    Forked from this worker's warm server (tests/few_at_a_time.py), as a warm check forks
    its phases: what is tested is what the traced process writes and says, not how it
    started, and the variables that differ between these runs (ours, the rank's) are not in
    a server's key, so they share one server instead of importing torch each.
    """
    environment = {
        **os.environ, "OMP_NUM_THREADS": "1", "TRAINPARITY_TRACE_STEP": str(step),
        "TRAINPARITY_TRACE_OUTPUT": str(output), **variables,
    }  # fmt: skip
    name = f"{script.stem}-step{step}-{output.stem}-rank{variables.get('RANK', '')}"
    run_dir = script.parent / "traced-runs" / name
    run_dir.mkdir(parents=True)
    argv = [sys.executable, str(script)]
    (code, stdout, stderr) = run_a_few_at_a_time(
        {name: argv}, cwd=run_dir, env=environment, warm=True
    )[name]
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


def test_record_calls_mark_the_traced_step(tmp_path, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text(_RECORDING_SCRIPT)
    # Recording as well: record()'s own freezing (aten::detach per tensor) must stay outside.
    monkeypatch.setenv("TRAINPARITY_RECORD", str(tmp_path / "recording"))
    output = tmp_path / "step2.trace"
    command = ["trace", "--step", "2", "--output", str(output), "--", sys.executable, str(script)]
    assert cli_main(command) == 0, capsys.readouterr().err
    traced = read_trace(output)
    names = [op.name for op in traced.ops]
    # One step: a training forward and the probe (2 addmm each), 4 SGD updates, and the
    # 4 detaches of record(2)'s state_dict() argument; nothing of step 1 or 3.
    assert traced.step == 2 and names[0] == "aten::randn"
    assert names.count("aten::addmm") == 4 and names.count("aten::add_.Tensor") == 4
    assert names.count("aten::full") == 1 and names[-4:] == ["aten::detach"] * 4
    last_update = max(index for index, name in enumerate(names) if name == "aten::add_.Tensor")
    assert names.index("aten::full") > last_update  # the probe after optimizer.step() is in
    # The same variable set by hand, without the CLI: step 3 is the same program. With the
    # variables torchrun gives the only rank of a one-rank job, which names no rank in the
    # trace's file (test_each_rank_of_a_multi_rank_job_writes_its_own_trace: two ranks do).
    by_hand = _run_traced(
        script, 3, tmp_path / "step3.trace", TRAINPARITY_RECORD=str(tmp_path / "recording3"),
        RANK="0", WORLD_SIZE="1",
    )  # fmt: skip
    assert by_hand.returncode == 0, by_hand.stderr
    assert sorted(path.name for path in tmp_path.glob("step3*")) == ["step3.trace"]
    assert [op.name for op in read_trace(tmp_path / "step3.trace").ops] == names


def test_each_rank_of_a_multi_rank_job_writes_its_own_trace(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_RECORDING_SCRIPT)
    for rank in (0, 1):  # the variables torchrun gives each rank
        ranked = _run_traced(script, 2, tmp_path / "run.trace", RANK=str(rank), WORLD_SIZE="2")
        assert ranked.returncode == 0, ranked.stderr
    assert sorted(path.name for path in tmp_path.glob("*.trace")) == [
        "run.rank0.trace",
        "run.rank1.trace",
    ]
    assert read_trace(tmp_path / "run.rank1.trace").step == 2
    # A one-rank job (RANK=0, WORLD_SIZE=1) writes the very file it was given: the by-hand run
    # of test_record_calls_mark_the_traced_step is one, sparing another interpreter here.


def test_a_step_that_record_never_reaches_or_skips_is_a_clear_error(tmp_path, capfd):
    script = tmp_path / "train.py"
    script.write_text(_RECORDING_SCRIPT)
    late = ["trace", "--step", "9", "--output", str(tmp_path / "late.trace"), "--"]
    assert cli_main([*late, sys.executable, str(script)]) == 3
    err = capfd.readouterr().err
    assert (
        "TRAINPARITY_TRACE_STEP=9 but step 9 never ended: the last record() call was for step 4"
        in err
    )
    assert "step 9 never ended (fewer record() calls or optimizer steps ran)" in err
    # A script whose first record() is after step 1 cannot delimit step 1 by record().
    unrecorded_start = tmp_path / "late_start.py"
    unrecorded_start.write_text(_RECORDING_SCRIPT.replace("FIRST = 0", "FIRST = 1"))
    skipped = _run_traced(unrecorded_start, 1, tmp_path / "step1.trace")
    assert skipped.returncode != 0
    assert (
        "TraceStepError: TRAINPARITY_TRACE_STEP=1: step 1 runs from record(0) to record(1), "
        "but this process's first record() call is for step 1" in skipped.stderr
    )
    assert not (tmp_path / "step1.trace").exists() and not (tmp_path / "late.trace").exists()


def test_step_tracer_rules_for_record_boundaries(tmp_path, capsys):
    from trainparity._internal.why.forensics.step_trace import StepTracer, TraceStepError

    def records(tracer, steps):
        for step in steps:
            tracer.record_arriving(step)
            torch.full((2,), float(step)).neg()  # as record()'s own work: in no step
            tracer.record_done(step)

    again = StepTracer(3, str(tmp_path / "again.trace"))
    records(again, [0, 1, 2, 2])  # the last record(2) begins step 3
    torch.ones(1).exp()
    records(again, [3])
    names = [op.name for op in read_trace(tmp_path / "again.trace").ops]
    assert names == ["aten::ones", "aten::exp"]
    with pytest.raises(TraceStepError, match="record\\(\\) went from step 2 to step 4; trace a"):
        records(StepTracer(3, str(tmp_path / "skip.trace")), [1, 2, 4])
    unfinished = StepTracer(3, str(tmp_path / "short.trace"))
    records(unfinished, [0, 1, 2])
    unfinished.finish()
    unfinished.finish()  # once: atexit calls it again after the launcher
    assert capsys.readouterr().err.count("the last record() call was for step 2") == 1
    assert not (tmp_path / "skip.trace").exists() and not (tmp_path / "short.trace").exists()
