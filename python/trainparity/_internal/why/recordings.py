"""explain_recordings: two recordings from two machines, side A rerun here under B's settable knobs.

The seed's experiment as one call: `trainparity explain RUN_A RUN_B
--rerun-a 'python train.py'`. The two recordings' environment fingerprints
say how the machines differ. Each difference a variable can set on this
machine becomes a knob: a variable the fingerprint records (`variables.*`),
torch's CPU dispatch (`cpu.torch_capability` → ATEN_CPU_CAPABILITY),
torch's thread count (`threads.torch_intra_op` → OMP_NUM_THREADS) and
NumPy's dispatch (`numpy.simd_dispatched` → NPY_DISABLE_CPU_FEATURES of
the features A has and B lacks). A's command is rerun here once as it is,
then once per knob at B's value, each rerun recording; a rerun that then
equals B's recording bit for bit confirms its knob. Hardware, versions and
GPUs are leads no rerun here can test.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.group import ChildGroup, ChildSpec
from trainparity._internal.processes.run_directory import (
    children_temporary_directory,
    run_directory,
)
from trainparity._internal.processes.termination import terminating_signals_unwind
from trainparity._internal.recording.reader import read_recording
from trainparity._internal.recording.variables import RECORD_VARIABLE
from trainparity._internal.why.environment_leads import environment_leads
from trainparity._internal.why.explanation import Explanation, LeadTrial
from trainparity._internal.why.knob_check import knob_took, recorded_fingerprints
from trainparity._internal.why.knobs import untestable_leads
from trainparity._internal.why.lead_trials import judged
from trainparity._internal.why.parting import parting, status_of

__all__ = ["explain_recordings", "fingerprint_knobs"]


def fingerprint_knobs(
    first: Mapping[str, Any] | None, second: Mapping[str, Any] | None
) -> list[tuple[str, dict[str, str]]]:
    """(knob, the variables that set B's value on A) for each settable fingerprint difference."""
    first, second = first or {}, second or {}
    knobs: list[tuple[str, dict[str, str]]] = []
    left_variables = first.get("variables") or {}
    right_variables = second.get("variables") or {}
    for name in sorted(set(left_variables) | set(right_variables)):
        value = right_variables.get(name)
        if left_variables.get(name) != value and value is not None:
            knobs.append((name, {name: str(value)}))
    left_cpu, right_cpu = first.get("cpu") or {}, second.get("cpu") or {}
    capability = right_cpu.get("torch_capability")
    if capability and left_cpu.get("torch_capability") != capability:
        knobs.append(("ATEN_CPU_CAPABILITY", {"ATEN_CPU_CAPABILITY": str(capability).lower()}))
    left_threads = (first.get("threads") or {}).get("torch_intra_op")
    right_threads = (second.get("threads") or {}).get("torch_intra_op")
    if right_threads and left_threads != right_threads and "OMP_NUM_THREADS" not in right_variables:
        knobs.append(("threads", {"OMP_NUM_THREADS": str(right_threads)}))
    left_numpy = set((first.get("numpy") or {}).get("simd_dispatched") or ())
    right_numpy = set((second.get("numpy") or {}).get("simd_dispatched") or ())
    extra = sorted(left_numpy - right_numpy)
    if extra and "NPY_DISABLE_CPU_FEATURES" not in right_variables:
        knobs.append(("NPY_DISABLE_CPU_FEATURES", {"NPY_DISABLE_CPU_FEATURES": " ".join(extra)}))
    return knobs


def explain_recordings(
    run_a: str | os.PathLike[str],
    run_b: str | os.PathLike[str],
    rerun_a: str | Sequence[str],
    *,
    cwd: Path | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    max_reruns: int = 8,
    rank: int | None = None,
) -> Explanation:
    """Rerun side A's command here under each of B's settable knobs; confirmed when it reproduces B."""
    began = time.perf_counter()
    argv = shlex.split(rerun_a) if isinstance(rerun_a, str) else list(rerun_a)
    if not argv:
        raise ValueError("rerun_a must be A's command, e.g. 'python train.py --steps 10'")
    left = read_recording(run_a, rank=rank)
    right = read_recording(run_b, rank=rank)
    original = parting(Path(run_a), Path(run_b))
    names = (str(run_a), str(run_b))
    if original is None:
        return Explanation(
            Outcome.PASS,
            "the two recordings are equal at every step both recorded: nothing to explain",
            case=" ".join(argv),
            sides=names,
        )
    knobs = fingerprint_knobs(left.environment, right.environment)
    leads = environment_leads(left.environment or {}, right.environment or {})
    command_dir = Path(cwd).resolve() if cwd is not None else Path.cwd().resolve()
    trials: list[LeadTrial] = []
    with (
        terminating_signals_unwind(),
        run_directory(None, temporary_root, "trainparity-explain-") as (
            root,
            _,
        ),
        children_temporary_directory(os.environ) as temporary,
    ):
        with ChildGroup() as group:
            runner = _CommandReruns(group, argv, command_dir, root, temporary, timeout)
            plain = runner.rerun("as-is", {})
            reproduces_a = parting(plain, Path(run_a)) is None
            for knob, values in knobs[:max_reruns]:
                rerun = runner.rerun(knob, values)
                status, evidence = status_of(parting(rerun, Path(run_b)), original)
                # "ruled out" only where the rerun's own fingerprint shows the knob took.
                took = knob_took(values, recorded_fingerprints([rerun]))
                status, evidence = judged(status, evidence, took)
                shown = " ".join(f"{name}={value}" for name, value in values.items())
                trials.append(
                    LeadTrial(
                        knob,
                        "A",
                        shown,
                        status,
                        f"A's command with {shown} against B: {evidence}",
                        f"A's command with {shown}",
                    )
                )
    for knob, _ in knobs[max_reruns:]:
        trials.append(LeadTrial(knob, "A", "B", "not tested", "--max-reruns reached"))
    for key, a, b, why in untestable_leads(leads):
        trials.append(LeadTrial(key, a, b, "not testable here", why))
    confirmed = [trial for trial in trials if trial.status == "confirmed"]
    if confirmed:
        message = (
            f"the divergence is explained by {confirmed[0].knob}: {confirmed[0].rerun} "
            "reproduces the other run bit for bit on this machine"
        )
    else:
        message = "no knob settable here reproduces B; the leads not tested stay leads"
    if not reproduces_a:
        message += (
            " (A's command, rerun here as it is, does not reproduce A's recording bit for bit)"
        )
    return Explanation(
        Outcome.PASS if confirmed else Outcome.ABSTAIN,
        message,
        case=" ".join(argv),
        trace_message="two recordings: only side A can be rerun here, so no op is traced",
        step=original[0],
        sides=names,
        leads=tuple(trials),
        reruns=runner.count,
        timing_seconds={"total_wall": time.perf_counter() - began},
    )


class _CommandReruns:
    """A's command rerun here, each rerun recording into its own directory."""

    def __init__(
        self,
        group: ChildGroup,
        argv: list[str],
        cwd: Path,
        root: Path,
        temporary: Path,
        timeout: float,
    ) -> None:
        self.group, self.argv, self.cwd, self.root, self.timeout = group, argv, cwd, root, timeout
        self.environment = {**os.environ, "TMPDIR": str(temporary)}  # the reruns' own, removed
        self.count = 0

    def rerun(self, label: str, values: Mapping[str, str]) -> Path:
        self.count += 1
        name = f"rerun{self.count}"
        directory = self.root / name
        directory.mkdir(parents=True)
        recording = directory / "recording"
        env = {**self.environment, **values, RECORD_VARIABLE: str(recording)}
        spec = ChildSpec(
            name=name,
            argv=self.argv,
            cwd=self.cwd,
            env=env,
            stdout_path=directory / "stdout.log",
            stderr_path=directory / "stderr.log",
        )
        self.group.start(spec, timeout=self.timeout)
        result = self.group.wait_for(name)
        if result is None or not result.succeeded:
            tail = (directory / "stderr.log").read_text(errors="replace")[-2000:]
            how = "timed out" if result is not None and result.timed_out else "failed"
            raise RuntimeError(
                f"A's command rerun ({label}) {how} (exit code "
                f"{None if result is None else result.exit_code}): {tail.strip()}"
            )
        return recording
