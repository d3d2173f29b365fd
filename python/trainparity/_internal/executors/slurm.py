"""SlurmExecutor: every training phase of a check submitted as a SLURM job through submitit.

`check_resume(..., executor=SlurmExecutor(partition="debug"))` submits each
phase (baseline_a, candidate_split, ...) as one job; phases the check runs
concurrently are concurrent jobs. The observer and the verdict stay in the
checking process, which reads the checkpoints from the run directory: that
directory (the check's `work_dir` or `temporary_root`) must be on a path
every node shares. Waiting prints the job id, state and node list when they
change; a job that ends in any state but COMPLETED (TIMEOUT, PREEMPTED,
CANCELLED, NODE_FAIL, OUT_OF_MEMORY, ...) is the check's ERROR, naming the
job; leaving the check by any way (verdict, Ctrl-C, SIGTERM) cancels every
job still queued or running. submitit is imported only when a check uses
this executor (`pip install trainparity[slurm]`).

Inside the job, submitit calls `run_phase`: the phase's command runs under
the same ChildGroup discipline as on the checking host (own process group,
timeout with SIGTERM then SIGKILL, logs to the phase's files, resources from
wait4), and only plain values travel back in submitit's result file. The
job's own SLURM_* variables are added to the phase's environment, so an
`srun torchrun ...` command sees its allocation.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainparity._internal.processes.group import (
    ChildResult,
    ChildSpec,
    EventCallback,
    run_children,
)
from trainparity._internal.processes.progress import ProgressReporter

__all__ = ["SlurmExecutor", "run_phase"]

# States in which a job may still produce its result (submitit's own list, plus CONFIGURING).
_UNFINISHED = frozenset(
    {"READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED"}
)
# A finished job's result file can lag its state on a network file system.
_RESULT_GRACE_SECONDS = 10.0
# A job's result is written before SLURM decides how the job ended (COMPLETED, or CANCELLED
# when it was cancelled while its command ran): the state is awaited this long after it.
_FINAL_STATE_SECONDS = 60.0
# SLURM's own limit is the phase timeout plus this margin: the node enforces the timeout
# itself first, so a TIMEOUT state means the job could not even be stopped in time.
_TIME_LIMIT_MARGIN_SECONDS = 120.0


@dataclass(frozen=True)
class SlurmExecutor:
    """Where and how the phases are submitted.

    `partition`, `nodes` (per phase: several for a multi-node `srun torchrun`
    command), `cpus_per_task` and `additional_parameters` (any other sbatch
    option, e.g. {"account": "proj"}) go to submitit. `folder`: where
    submitit keeps its job scripts and logs (default: `slurm/` in the run
    directory). `queue_timeout`: seconds a job may wait in the queue before
    the check cancels it and reports ERROR. `poll_seconds`: how often the
    scheduler is asked for the job's state.
    """

    partition: str | None = None
    nodes: int = 1
    cpus_per_task: int | None = None
    additional_parameters: Mapping[str, Any] = field(default_factory=dict)
    folder: Path | None = None
    queue_timeout: float = 600.0
    poll_seconds: float = 0.25

    def __post_init__(self) -> None:
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValueError(f"nodes must be a positive int, got {self.nodes!r}")
        for name in ("queue_timeout", "poll_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @classmethod
    def from_environment(cls, environment: Mapping[str, str] | None = None) -> SlurmExecutor:
        """The cluster as `sbatch` reads it: SLURM_CONF for the clients, SBATCH_PARTITION."""
        variables = os.environ if environment is None else environment
        return cls(partition=variables.get("SBATCH_PARTITION") or None)

    def launcher(
        self, *, run_root: Path, on_event: EventCallback, progress: ProgressReporter
    ) -> SlurmLauncher:
        try:
            import submitit  # noqa: F401  (the optional dependency, checked before any job)
        except ImportError as error:
            raise RuntimeError(
                "SlurmExecutor needs submitit: pip install 'trainparity[slurm]'"
            ) from error
        return SlurmLauncher(self, self.folder or run_root / "slurm", on_event, progress)


@dataclass
class _Submitted:
    spec: ChildSpec
    job: Any  # submitit.SlurmJob
    submitted: float
    timeout: float
    started: float | None = None
    result_seen: float | None = None
    seen: tuple[str, str] = ("", "")  # (state, node list) last shown


class SlurmLauncher:
    """The PhaseLauncher of one check on SLURM (processes/executor.py)."""

    def __init__(
        self,
        executor: SlurmExecutor,
        folder: Path,
        on_event: EventCallback,
        progress: ProgressReporter,
    ) -> None:
        self.executor = executor
        self.folder = folder
        self.on_event = on_event
        self.progress = progress
        self.running: dict[str, _Submitted] = {}
        self.results: dict[str, ChildResult] = {}

    def start(self, spec: ChildSpec, *, timeout: float | None) -> str:
        """Submit the phase as one job; returns its job id."""
        import submitit

        limit = 24 * 3600.0 if timeout is None else timeout
        submitter = submitit.SlurmExecutor(folder=self.folder / "%j")
        submitter.update_parameters(
            job_name=f"trainparity-{spec.name}",
            time=math.ceil((limit + _TIME_LIMIT_MARGIN_SECONDS) / 60),
            nodes=self.executor.nodes,
            ntasks_per_node=1,
            **({"partition": self.executor.partition} if self.executor.partition else {}),
            **(
                {"cpus_per_task": self.executor.cpus_per_task}
                if self.executor.cpus_per_task
                else {}
            ),
            additional_parameters=dict(self.executor.additional_parameters),
        )
        job = submitter.submit(
            run_phase,
            spec.name,
            list(spec.argv),
            str(spec.cwd),
            dict(spec.env),
            str(spec.stdout_path),
            str(spec.stderr_path),
            limit,
        )
        self.running[spec.name] = _Submitted(spec, job, time.monotonic(), limit)
        self.on_event(spec.name, "start", None)
        self.progress.event(spec.name, "state", detail=f"SLURM job {job.job_id} submitted")
        return str(job.job_id)

    def wait_for(self, name: str, timeout: float | None = None) -> ChildResult | None:
        """Poll job `name` until it ended (its result) or `timeout` seconds passed (None)."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while name in self.running:
            if time.monotonic() >= deadline:
                return None
            self._poll(self.running[name])
            if name in self.running:
                time.sleep(self.executor.poll_seconds)
        return self.results.get(name)

    def close(self) -> None:
        """Cancel every job still queued or running (scancel); none is left behind."""
        for submitted in self.running.values():
            submitted.job.cancel(check=False)
        self.running.clear()

    # Internals ------------------------------------------------------------------------

    def _poll(self, submitted: _Submitted) -> None:
        job = submitted.job
        info = job.get_info(mode="force")
        state = _state(info)
        self._show(submitted, state, info.get("NodeList") or "")
        now = time.monotonic()
        if state == "RUNNING" and submitted.started is None:
            submitted.started = now
        if job.paths.result_pickle.exists() and submitted.result_seen is None:
            submitted.result_seen = now
        if state not in _UNFINISHED:
            # The result may still be on its way through a network file system.
            grace_end = now + _RESULT_GRACE_SECONDS
            while time.monotonic() < grace_end and not job.paths.result_pickle.exists():
                time.sleep(self.executor.poll_seconds)
            self._finish(submitted, state)
        elif submitted.result_seen is not None:
            if now - submitted.result_seen > _FINAL_STATE_SECONDS:
                self._finish(submitted, "COMPLETED")  # the job function did report its phase
        elif submitted.started is None and now - submitted.submitted > self.executor.queue_timeout:
            job.cancel(check=False)
            self._finish(submitted, "QUEUE_TIMEOUT")
        elif now - (submitted.started or now) > submitted.timeout + _TIME_LIMIT_MARGIN_SECONDS:
            job.cancel(check=False)
            self._finish(submitted, "TIMEOUT")

    def _show(self, submitted: _Submitted, state: str, nodes: str) -> None:
        """A progress line when the job's state or node list changed."""
        if (state, nodes) == submitted.seen:
            return
        submitted.seen = (state, nodes)
        where = f" on {nodes}" if nodes and nodes != "None assigned" else ""
        self.progress.event(
            submitted.spec.name, "state", detail=f"SLURM job {submitted.job.job_id} {state}{where}"
        )

    def _finish(self, submitted: _Submitted, state: str) -> None:
        name = submitted.spec.name
        del self.running[name]
        job = submitted.job
        wall = time.monotonic() - submitted.submitted
        fields: dict[str, Any] = {}
        if job.paths.result_pickle.exists():
            try:
                # A job that SLURM cancelled, timed out or preempted may still have reported
                # its killed command: `state` (not COMPLETED) then makes it the check's ERROR.
                fields = dict(job.result())
            except Exception as error:  # the job function failed: submitit re-raises its traceback
                state = f"FAILED ({type(error).__name__})"
        if fields:
            result = ChildResult(**{**fields, "job_id": str(job.job_id), "job_state": state})
        else:
            result = ChildResult(
                name=name,
                pid=0,
                exit_code=None,
                signal=None,
                timed_out=state == "TIMEOUT",
                wall_seconds=wall,
                user_seconds=0.0,
                sys_seconds=0.0,
                peak_rss_bytes=0,
                job_id=str(job.job_id),
                job_state=state,
            )
        self.results[name] = result
        self.on_event(name, "end", result)


def _state(info: Mapping[str, str]) -> str:
    """The job's state word from sacct's answer: `CANCELLED by 0` is CANCELLED."""
    return (info.get("State") or "UNKNOWN").split()[0].upper()


# What the job runs on its node ----------------------------------------------------------


def run_phase(
    name: str,
    argv: list[str],
    cwd: str,
    environment: dict[str, str],
    stdout_path: str,
    stderr_path: str,
    timeout: float,
) -> dict[str, Any]:
    """Run one phase to its end on this node; its ChildResult's fields."""
    allocation = {key: value for key, value in os.environ.items() if key.startswith("SLURM")}
    spec = ChildSpec(
        name=name,
        argv=argv,
        cwd=Path(cwd),
        env={**environment, **allocation},
        stdout_path=Path(stdout_path),
        stderr_path=Path(stderr_path),
    )
    (result,) = run_children([spec], timeout=timeout)
    return asdict(result)
