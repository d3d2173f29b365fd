"""What explain() costs against the check it explains, and what tracing one step costs.

    python benchmarks/bench_explain.py [--repeats 3] [--step-repeats 10] [--skip-check] [--json PATH]

1. Explain cost. check_runs of tests.fixtures.noisy_training:ThreadRuns (two
   variants, 1 and 2 threads, each run twice, T = total_step steps each;
   FAIL at the first divergent step N), then explain() of that result:
   with max_reruns=0 (only the two traced reruns to step N) and with its
   default budget (plus one rerun per tested knob). The three are
   alternated, --repeats rounds after a warm-up round, medians compared.
   Targets: traced-only / check ≤ N/T + 0.3, and each knob rerun costs
   about one such rerun. A rerun is a process start (here forked from a
   warm server that imports torch first) + N steps, so on this small
   script the fixed start cost dominates: the floor is a bare
   `python -c "import torch"`, timed in the same rounds.
2. Step-trace cost. In this process, the noisy script's own training step
   (nt.train_one_step, NOISY_ORDER=threads, --threads threads) untraced,
   against the same step traced as record() traces it under
   TRAINPARITY_TRACE_STEP=N: a StepTracer (why/forensics/step_trace.py) whose
   record_done(N-1) begins the session and record_arriving(N) ends it and
   writes the trace file, both inside the timed region (record()'s own
   recording lies outside the step in both arms). Target: traced /
   untraced ≤ 3.

Medians of one process; both arms of every ratio measured in the same run.
Each figure is given as wall time and as CPU time (this process and the
children it waited for, from getrusage): the targets are wall-time ones, the
CPU figures are what another load on the machine disturbs least.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import trainparity
from trainparity import trace
from trainparity._internal.why.forensics.capture import debug_mode_available
from trainparity._internal.why.forensics.step_trace import StepTracer
from trainparity._internal.why.forensics.trace_file import read_trace

REPOSITORY = Path(__file__).resolve().parent.parent
CASE = "tests.fixtures.noisy_training:ThreadRuns"
EXPLAIN_MARGIN = 0.3  # target: traced reruns / check ≤ N/T + 0.3
TRACE_TARGET = 3.0


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its children that have been waited for."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(action: Callable[..., Any], *arguments: Any) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process and its children, value) of one call.

    The CPU figure is what a loaded machine disturbs least (other processes
    stretch the wall time, not the CPU time the work needs).
    """
    cpu, began = cpu_seconds(), time.perf_counter()
    value = action(*arguments)
    return time.perf_counter() - began, cpu_seconds() - cpu, value


def interpreter(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPOSITORY)


def bench_explain(arguments: argparse.Namespace, work: Path) -> dict[str, object]:
    from tests.fixtures.noisy_training import ThreadRuns

    counter = iter(range(10**6))

    def fresh_root() -> Path:
        root = work / f"root{next(counter)}"
        root.mkdir(parents=True)
        return root

    def check() -> Any:
        result = trainparity.check_runs(
            CASE, cwd=REPOSITORY, temporary_root=fresh_root(), start=arguments.start, progress=False
        )
        if str(result.outcome.value) != "FAIL":
            raise SystemExit(f"check_runs({CASE}) did not FAIL: {result.outcome} {result.message}")
        return result

    def explained(result: Any, max_reruns: int | None) -> Any:
        options = {} if max_reruns is None else {"max_reruns": max_reruns}
        explanation = trainparity.explain(
            result,
            cwd=REPOSITORY,
            temporary_root=fresh_root(),
            start=arguments.start,
            progress=False,
            **options,
        )
        if str(explanation.outcome.value) == "ERROR":
            raise SystemExit(f"explain failed: {explanation.message}")
        return explanation

    arms = ("python", "import_torch", "check", "traced_only", "full")
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    cpu_times: dict[str, list[float]] = {arm: [] for arm in arms}
    inner: dict[str, list[float]] = {"traced_only": [], "full": []}
    result = traced = full = None
    for round_index in range(arguments.repeats + 1):  # round 0 warms up: imports, page cache
        seconds, cpu = {}, {}
        seconds["python"], cpu["python"], _ = timed(interpreter, "pass")
        seconds["import_torch"], cpu["import_torch"], _ = timed(interpreter, "import torch")
        seconds["check"], cpu["check"], result = timed(check)
        seconds["traced_only"], cpu["traced_only"], traced = timed(explained, result, 0)
        seconds["full"], cpu["full"], full = timed(explained, result, None)
        if round_index == 0:
            continue
        for arm in arms:
            times[arm].append(seconds[arm])
            cpu_times[arm].append(cpu[arm])
        inner["traced_only"].append(traced.timing_seconds["total_wall"])
        inner["full"].append(full.timing_seconds["total_wall"])
    median = {arm: statistics.median(values) for arm, values in times.items()}
    cpu_median = {arm: statistics.median(values) for arm, values in cpu_times.items()}
    step = int(result.trajectory["first_divergence"]["step"])
    total = int(ThreadRuns.total_step)
    runs = 2 * len(ThreadRuns.variants)  # check_runs runs each variant twice
    knob_reruns = full.reruns - traced.reruns
    tested = [lead for lead in full.leads if lead.status not in ("not tested", "not testable here")]
    target = step / total + EXPLAIN_MARGIN

    def ratios(of: dict[str, float]) -> dict[str, float]:
        per_knob = (of["full"] - of["traced_only"]) / max(knob_reruns, 1)
        return {
            "traced_over_check": of["traced_only"] / of["check"],
            "per_knob_rerun_seconds": per_knob,
            "per_knob_over_check": per_knob / of["check"],
            "per_knob_over_import_torch": per_knob / of["import_torch"],
            "traced_over_import_torch": of["traced_only"] / of["import_torch"],
            "check_over_import_torch": of["check"] / of["import_torch"],
        }

    wall, cpu = ratios(median), ratios(cpu_median)
    divergence = result.trajectory["first_divergence"]
    print(
        f"1. explain cost: {CASE}, start={arguments.start!r}, {arguments.repeats} alternated "
        f"rounds after a warm-up round; {usable_cores()} usable cores"
    )
    print(
        f"   check_runs: {runs} runs of T={total} steps, {result.outcome.value} at step N={step} "
        f"({divergence['baseline_phase']} vs {divergence['candidate_phase']})"
    )
    print("                                   wall   CPU (this process + its children)")
    rows = (
        ("python", "python -c pass", ""),
        ("import_torch", "python -c 'import torch'", "  a rerun's floor"),
        ("check", "check_runs", ""),
        (
            "traced_only",
            "explain(max_reruns=0)",
            f"  {traced.reruns} traced reruns to step {step}; first op "
            f"{(traced.first_op or {}).get('op')}",
        ),
        (
            "full",
            "explain()",
            f"  {full.reruns} reruns; {full.outcome.value}: "
            + "; ".join(f"{lead.knob} {lead.status}" for lead in full.leads),
        ),
    )
    for arm, label, note in rows:
        print(f"   {label:<26} {median[arm]:6.2f} s {cpu_median[arm]:6.2f} s{note}")
    for name, figures in (("wall", wall), ("CPU", cpu)):
        verdict = "met" if figures["traced_over_check"] <= target else "MISSED"
        print(
            f"   {name}: traced-only / check {figures['traced_over_check']:.2f} (target ≤ N/T + "
            f"{EXPLAIN_MARGIN} = {target:.2f}: {verdict}); per knob rerun "
            f"{figures['per_knob_rerun_seconds']:.2f} s = {figures['per_knob_over_check']:.2f} × "
            f"the check ({knob_reruns} knob reruns, {len(tested)} knobs tested)"
        )
        print(
            f"        in import-torch floors: traced-only {figures['traced_over_import_torch']:.1f}, "
            f"per knob rerun {figures['per_knob_over_import_torch']:.1f}, check "
            f"{figures['check_over_import_torch']:.1f}"
        )
    return {
        "case": CASE,
        "start": arguments.start,
        "repeats": arguments.repeats,
        "cores": usable_cores(),
        "first_divergent_step": step,
        "total_step": total,
        "check_runs_processes": runs,
        "medians_seconds": median,
        "cpu_medians_seconds": cpu_median,
        "all_seconds": times,
        "all_cpu_seconds": cpu_times,
        "explain_total_wall_seconds": inner,
        "traced_reruns": traced.reruns,
        "full_reruns": full.reruns,
        "first_op": traced.first_op,
        "explanation_outcome": str(full.outcome.value),
        "leads": [
            {"knob": lead.knob, "status": lead.status, "evidence": lead.evidence}
            for lead in full.leads
        ],
        "traced_target": target,
        "wall": wall,
        "cpu": cpu,
        "traced_met": wall["traced_over_check"] <= target,
    }


@contextmanager
def step_settings(threads: int) -> Iterator[None]:
    """NOISY_ORDER=threads and `threads` torch threads, as the case's variant runs; restored after."""
    previous_order, previous_threads = os.environ.get("NOISY_ORDER"), torch.get_num_threads()
    os.environ["NOISY_ORDER"] = "threads"
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous_threads)
        if previous_order is None:
            del os.environ["NOISY_ORDER"]
        else:
            os.environ["NOISY_ORDER"] = previous_order


def bench_step_trace(arguments: argparse.Namespace, work: Path, step: int) -> dict[str, object]:
    import tests.fixtures.noisy_training as nt

    folder = work / "traces"
    folder.mkdir(parents=True)
    counter = iter(range(10**6))
    with step_settings(arguments.threads):
        run = nt.Run()
        inputs, targets = nt.dataset()

        def untraced() -> None:
            nt.train_one_step(run, inputs, targets)

        def traced() -> Path:
            # record(N-1) has recorded: the step begins; record(N) arrives: it ends, written.
            path = folder / f"step{next(counter)}.trace"
            tracer = StepTracer(step, str(path))
            tracer.record_arriving(step - 1)  # what record(N-1) does before recording (no op)
            tracer.record_done(step - 1)
            nt.train_one_step(run, inputs, targets)
            tracer.record_arriving(step)
            return path

        def dispatch_traced() -> None:
            path = folder / f"dispatch{next(counter)}.trace"
            trace(path, capture="TorchDispatchMode", step=step, run=untraced)

        untraced()  # the first step: Adam's state, _big's 2M-element tensor
        loaded_before = "torch._inductor.lowering" in sys.modules
        first_seconds, _, sample = timed(traced)  # the first trace of this process: its imports
        ops = len(read_trace(sample).ops)
        trace_bytes = sample.stat().st_size
        dispatch_traced()  # its warm-up
        arms = {"untraced": untraced, "traced": traced, "dispatch_traced": dispatch_traced}
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        cpu_times: dict[str, list[float]] = {arm: [] for arm in arms}
        faults: dict[str, list[int]] = {arm: [] for arm in arms}
        for _ in range(arguments.step_repeats):  # alternated, so a busy spell hits every arm
            for arm, action in arms.items():
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                wall, cpu, _ = timed(action)
                faults[arm].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
                times[arm].append(wall)
                cpu_times[arm].append(cpu)
    median = {arm: statistics.median(values) for arm, values in times.items()}
    cpu_median = {arm: statistics.median(values) for arm, values in cpu_times.items()}
    ratio = median["traced"] / median["untraced"]
    cpu_ratio = cpu_median["traced"] / cpu_median["untraced"]
    dispatch_ratio = median["dispatch_traced"] / median["untraced"]
    cpu_dispatch_ratio = cpu_median["dispatch_traced"] / cpu_median["untraced"]
    capture = "DebugMode" if debug_mode_available() else "TorchDispatchMode"
    print(
        f"2. step-trace cost: nt.train_one_step (NOISY_ORDER=threads, {arguments.threads} "
        f"thread(s)) in this process, median of {arguments.step_repeats} alternated, after a "
        "warm-up"
    )
    print("                                          wall       CPU")
    print(
        f"   untraced step                     {median['untraced'] * 1e3:7.1f} ms "
        f"{cpu_median['untraced'] * 1e3:7.1f} ms"
    )
    print(
        f"   traced step                       {median['traced'] * 1e3:7.1f} ms "
        f"{cpu_median['traced'] * 1e3:7.1f} ms  (StepTracer, step {step}, capture auto = "
        f"{capture}; {ops} ops, trace file {trace_bytes / 1024:.0f} KiB)"
    )
    print(
        f"   trace(capture='TorchDispatchMode') {median['dispatch_traced'] * 1e3:6.1f} ms "
        f"{cpu_median['dispatch_traced'] * 1e3:7.1f} ms  (for comparison)"
    )
    print(
        f"   traced / untraced: wall {ratio:.2f}, CPU {cpu_ratio:.2f}  (target ≤ {TRACE_TARGET}: "
        f"{'met' if ratio <= TRACE_TARGET else 'MISSED'}); TorchDispatchMode: wall "
        f"{dispatch_ratio:.2f}, CPU {cpu_dispatch_ratio:.2f}"
    )
    fault_median = {arm: statistics.median(values) for arm, values in faults.items()}
    fastest = {arm: min(values) for arm, values in times.items()}
    print(
        f"   minor page faults per step (median): untraced {fault_median['untraced']:.0f}, traced "
        f"{fault_median['traced']:.0f} (the step's 8 MB temporaries, mapped afresh as the "
        "allocator decides: the untraced step's time varies between runs)"
    )
    print(
        f"   fastest of each: untraced {fastest['untraced'] * 1e3:.1f} ms, traced "
        f"{fastest['traced'] * 1e3:.1f} ms: traced / untraced {fastest['traced'] / fastest['untraced']:.2f}"
    )
    print(
        f"   first traced step of this process: {first_seconds * 1e3:.0f} ms wall (one-time "
        f"imports; torch._inductor.lowering loaded before: {loaded_before}) = "
        f"{first_seconds / median['untraced']:.1f} × the untraced step"
    )
    return {
        "threads": arguments.threads,
        "traced_step": step,
        "repeats": arguments.step_repeats,
        "capture": capture,
        "medians_seconds": median,
        "cpu_medians_seconds": cpu_median,
        "all_seconds": times,
        "all_cpu_seconds": cpu_times,
        "minor_page_faults_medians": fault_median,
        "fastest_seconds": fastest,
        "fastest_ratio": fastest["traced"] / fastest["untraced"],
        "first_traced_step_seconds": first_seconds,
        "inductor_lowering_loaded_before_first_trace": loaded_before,
        "trace_ops": ops,
        "trace_file_bytes": trace_bytes,
        "ratio": ratio,
        "cpu_ratio": cpu_ratio,
        "dispatch_ratio": dispatch_ratio,
        "cpu_dispatch_ratio": cpu_dispatch_ratio,
        "target": TRACE_TARGET,
        "met": ratio <= TRACE_TARGET,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternated rounds, part 1")
    parser.add_argument("--step-repeats", type=int, default=10, help="timed steps per arm, part 2")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the part-2 step")
    parser.add_argument("--start", choices=("fresh", "warm"), default="warm", help="part 1")
    parser.add_argument("--skip-check", action="store_true", help="only the step-trace part")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args()
    if str(REPOSITORY) not in sys.path:  # the case is imported here too, as tests.fixtures...
        sys.path.insert(0, str(REPOSITORY))
    print(
        f"trainparity {trainparity.__version__}, torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, {usable_cores()} usable cores; "
        "medians, both arms of a ratio in this run"
    )
    report: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-explain-") as work_text:
        work = Path(work_text)
        step = 1
        if not arguments.skip_check:
            report["explain"] = bench_explain(arguments, work / "explain")
            step = int(report["explain"]["first_divergent_step"])  # type: ignore[index]
        report["step_trace"] = bench_step_trace(arguments, work / "step", step)
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
