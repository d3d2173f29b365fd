"""The training children of one check: launch, wait, account, find the checkpoint.

check_resume and check_runs both run a case's command as fresh child
processes ("phases": baseline_a, candidate_split, …; or a variant's runs
`accum4_a`, …). What happens around each child is the same for both and
lives here: the command callback and its validation, the multi-rank
additions (a sweep tag, torchrun's own temporary directory, the fixed-port
check for concurrent phases, the failing rank named in an ERROR), the
environment for `record()`, the `processes` evidence, and the checkpoint the
case declares. The decisions (which phase to wait for, what to compare) stay
with each check.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainparity._internal.distributed import phases as multirank
from trainparity._internal.distributed.rank_processes import (
    MeasuredExit,
    rank_event_detail,
    rank_evidence,
    read_rank_exits,
    unsampled_exit_events,
)
from trainparity._internal.distributed.rank_watcher import RankEvent, RankSample, RankWatcher
from trainparity._internal.distributed.torchrun_argv import local_ranks
from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.baseline_cache import BaselineCache
from trainparity._internal.processes.check_result import (
    ExternalProcessEvidence,
    NodeProcessEvidence,
)
from trainparity._internal.processes.check_runner import RunSettings
from trainparity._internal.processes.child_environment import phase_cwd, phase_environment
from trainparity._internal.processes.executor import (
    PhaseLauncher,
    bind_local_launcher,
    replays,
)
from trainparity._internal.processes.failure_text import (
    directory_listing,
    exit_message,
    explained_failure,
    failure_block,
    foreign_interpreter_hint,
    log_tail,
    shown_path,
    timeout_message,
)
from trainparity._internal.processes.group import (
    ChildGroup,
    ChildLaunchError,
    ChildResult,
    ChildSpec,
)
from trainparity._internal.processes.observer.client import ObserverClient
from trainparity._internal.protocols import ProcessExecutionPlan
from trainparity._internal.state.snapshot import Snapshot

__all__ = [
    "PhaseChildren",
    "PhaseError",
    "TrainingPhase",
    "path_bytes",
    "validated_command",
]


class PhaseError(Exception):
    """A phase could not run or be observed; carries the verdict to return."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


@dataclass
class TrainingPhase:
    """Book-keeping of one training child.

    `extra_args` are appended to the case's command and `extra_env` added to
    the check's environment (a check_runs variant; the variables for
    `record()`). `emptied` are directories the check gives the child to write
    (its recordings), removed before it starts with its ID record directory.
    """

    name: str
    end_step: int
    run_dir: Path
    resume_from: Path | None = None
    world_size: int | None = None  # the rank count asked of the case (an elastic resume)
    layout: str | None = None  # the layout asked of the case (a layout change)
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    emptied: tuple[Path, ...] = ()
    started: bool = False
    argv: tuple[str, ...] = ()  # as started; the failure of a foreign interpreter names it
    tag: str | None = None  # in the phase's environment; what multirank.sweep kills
    ranks: int = 1  # a torchrun phase's local ranks, which share the phase's threads
    rank_samples: tuple[RankSample, ...] = ()  # a torchrun phase's ranks, as last sampled
    exits_file: Path | None = None  # a torchrun phase's, where a warm agent measures its ranks
    rank_exits: Mapping[int, MeasuredExit] = field(default_factory=dict)  # read once, at its end
    result: ChildResult | None = None
    error: PhaseError | None = None
    # A baseline restored from the cache (processes/baseline_cache.py): the evidence of the
    # process that produced it; or, for one that ran, the key its outputs are stored under.
    cached_evidence: ExternalProcessEvidence | None = None
    cache_key: str | None = None

    def outputs(self) -> dict[str, Path]:
        """The directories a cached phase's entry holds: its run directory and `emptied`."""
        return {
            "run_dir": self.run_dir,
            **{f"output{index}": path for index, path in enumerate(self.emptied)},
        }


class PhaseChildren:
    """Starts, waits for and accounts the training children of one check.

    `timings` is the check's timing dict: a child's wall time goes in under
    `timing_keys.get(name, name)` once the decision sequence reaches it.
    """

    def __init__(
        self,
        *,
        case_spec: str,
        case: object,
        settings: RunSettings,
        phases: Mapping[str, TrainingPhase],
        timings: dict[str, float],
        timing_keys: Mapping[str, str] | None = None,
        case_kind: str = "resume",
        baseline_cache: BaselineCache | None = None,
    ) -> None:
        self.case = case
        self.baseline_cache = baseline_cache
        self.settings = settings
        self.phases = dict(phases)
        self.timings = timings
        self.timing_keys = dict(timing_keys or {})
        self.group = ChildGroup(on_event=self._on_child_event, launcher=settings.starter.launch)
        # The training phases' launcher: this group, or an executor's (e.g. SLURM jobs).
        self.launcher: PhaseLauncher = self.group
        if settings.executor is not None:
            self.launcher = settings.executor.launcher(
                run_root=settings.run_root,
                on_event=self._on_child_event,
                progress=settings.progress,
            )
            bind_local_launcher(self.launcher, self.group)  # judge --run-missing's phases
        self.rank_watcher = RankWatcher(self._on_rank_event)
        # One observer worker in the same group snapshots every phase's checkpoint.
        self.observer = ObserverClient(
            group=self.group,
            case_spec=case_spec,
            snapshot_dir=settings.run_root / "snapshots",
            cwd=settings.command_dir,
            environment=settings.environment,
            timeout=settings.timeout,
            progress=settings.progress,
            case_kind=case_kind,
            timings=timings,
            on_environment=settings.observed_environment,
        )
        self.processes: list[ExternalProcessEvidence] = []
        self.checkpoint_max_bytes = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The group's lifetime; on leaving, every child is killed and every phase tag swept.

        torchrun starts its ranks in new sessions, outside the group's process
        group: whatever still carries a phase tag (ranks, their workers) is
        killed by the sweep.
        """
        with (
            multirank.swept(self._phase_tags),
            self.rank_watcher,
            self.group,
            contextlib.closing(self.launcher),
        ):
            try:
                yield
            finally:
                self.observer.stop()

    def start_concurrently(self, names: Iterable[str]) -> None:
        """Start the observer worker and the named phases at once (they run while others wait)."""
        self.observer.start()
        for name in names:
            self.start(name)

    def observed(self, name: str, checkpoint: Path | None = None) -> Snapshot:
        """The snapshot of a phase's checkpoint (by default: run the phase, then its checkpoint).

        An observation that fails raises ObservationFailure, which carries its verdict.
        """
        if checkpoint is None:
            checkpoint = self.trained(name)
        return self.observer.observe(name, checkpoint).snapshot

    def evidence_fields(self) -> dict[str, int]:
        """The size figures every result of a check with training children reports."""
        return {
            "snapshot_ipc_bytes": self.observer.file_bytes,
            "checkpoint_max_bytes": self.checkpoint_max_bytes,
        }

    def trained(self, name: str) -> Path:
        """Run (or finish waiting for) a training child; return its checkpoint path."""
        phase = self.phases[name]
        if not phase.started:
            self.start(name)
        if phase.error is None:  # else the command callback or the launch failed
            if phase.result is None:
                self.launcher.wait_for(name)
            self._account(phase)
        if phase.error is not None:
            raise phase.error
        checkpoint = self._checkpoint_after(phase)
        if phase.cache_key is not None and self.baseline_cache is not None:
            self._store(phase, checkpoint, phase.cache_key, self.baseline_cache)
            phase.cache_key = None  # stored once, whoever asks for the phase again
        return checkpoint

    def _store(
        self, phase: TrainingPhase, checkpoint: Path, key: str, cache: BaselineCache
    ) -> None:
        """Keep a baseline that ran, unless its checkpoint lies where an entry would not hold it."""
        if not checkpoint.resolve().is_relative_to(phase.run_dir.resolve()):
            cache.outcomes[phase.name] = (
                f"ran: its checkpoint {checkpoint} is outside its run directory, which is "
                "what the cache keeps"
            )
            return
        evidence = next(item for item in self.processes if item.phase == phase.name)
        cache.store(key, phase.outputs(), evidence)

    def start(self, name: str) -> None:
        """Launch a phase's child; a failure is kept on the phase and raised when it is awaited."""
        phase = self.phases[name]
        phase.started = True
        phase.run_dir.mkdir(parents=True, exist_ok=True)
        plan = ProcessExecutionPlan(
            phase=phase.name,
            cwd=self.settings.command_dir,
            run_dir=phase.run_dir,
            end_step=phase.end_step,
            resume_from=phase.resume_from,
            world_size=phase.world_size,
            layout=phase.layout,
        )
        try:
            argv = [*validated_command(self.case.command(plan)), *phase.extra_args]
            cwd = phase_cwd(self.case, plan)
        except Exception as error:
            phase.error = PhaseError(
                Outcome.ERROR,
                f"{phase.name} command callback or validation failed: {error_text(error)}",
            )
            return
        # A launcher that binds a fixed port (plain torchrun, another rank launcher) gets a
        # free port of its own; one whose port the user wrote waits and runs alone.
        remedy = (
            multirank.own_port(argv, self.settings.environment) if self.settings.parallel else None
        )
        keyed_argv = tuple(argv)  # the port a remedy picks is per launch: not in a cache key
        if remedy is not None:
            argv = remedy.argv
        phase.ranks = local_ranks(argv, {**self.settings.environment, **phase.extra_env})
        variables = self.settings.threads.environment(
            phase_environment(self.settings.environment, cwd=cwd, check_cwd=plan.cwd),
            ranks=phase.ranks,
            own=phase.extra_env,
        )
        # One TMPDIR for every phase of the check (each torchrun agent makes its own directory
        # in it), removed with the check.
        try:
            # A kept work_dir's last check's records: record_ids appends to a phase's files
            # (the old IDs would be consumed again: a false sample_repeated), and record()
            # refuses to write over a recording. A replay (`trainparity judge`) launches
            # nothing: those records are the phase's own, which it is about to read.
            replayed = replays(self.launcher, phase.name)
            for directory in (
                () if replayed else (multirank.ids_path(phase.run_dir), *phase.emptied)
            ):
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(directory)
            environment, phase.tag = multirank.phase_environment(
                argv, variables, phase.run_dir, temporary_dir=self.settings.temporary_dir
            )
        except OSError as error:
            phase.error = PhaseError(
                Outcome.ERROR, f"{phase.name} child launch failed: {error_text(error)}"
            )
            return
        if self._restored(phase, keyed_argv, cwd, environment):
            return
        if remedy is not None:
            environment = {**environment, **remedy.environment}
            if remedy.alone:
                self._wait_for_the_others(phase.name)
        self.rank_watcher.watch(phase.name, phase.tag, argv)  # only torchrun phases are watched
        exits_file = environment.get(multirank.RANK_EXITS_FILE_VARIABLE)
        phase.exits_file = Path(exits_file) if exits_file else None
        phase.argv = tuple(argv)
        try:
            spec = ChildSpec(
                name=phase.name,
                argv=argv,
                cwd=cwd,
                env=environment,
                stdout_path=phase.run_dir / "stdout.log",
                stderr_path=phase.run_dir / "stderr.log",
            )
            self.launcher.start(spec, timeout=self.settings.timeout)
        except (ChildLaunchError, OSError, TypeError, ValueError, RuntimeError) as error:
            self.rank_watcher.close(phase.name)  # no ranks will come
            phase.error = PhaseError(
                Outcome.ERROR, f"{phase.name} child launch failed: {error_text(error)}"
            )

    def _restored(
        self,
        phase: TrainingPhase,
        argv: tuple[str, ...],
        cwd: Path,
        environment: Mapping[str, str],
    ) -> bool:
        """Whether a baseline's outputs came from the cache (then it is finished, not started).

        Otherwise a phase the cache covers runs, and `outcomes` says why when its
        key could not be trusted or its entry was damaged.
        """
        cache = self.baseline_cache
        if cache is None or not cache.covers(phase.name):
            return False
        key, untrusted = cache.key(phase.name, argv, cwd, environment)
        if key is None:
            cache.outcomes[phase.name] = f"ran: {untrusted}"
            return False
        evidence, damaged = cache.restore(key, phase.outputs())
        if evidence is None:
            cache.outcomes[phase.name] = f"ran: {damaged}" if damaged else "ran"
            phase.cache_key = key
            phase.run_dir.mkdir(parents=True, exist_ok=True)  # a damaged entry's copy is gone
            return False
        cache.outcomes[phase.name] = "reused"
        phase.tag = None  # no process was started to carry it
        phase.cached_evidence = evidence
        phase.result = ChildResult(
            name=phase.name,
            pid=evidence.pid,
            exit_code=0,
            signal=None,
            timed_out=False,
            wall_seconds=evidence.elapsed_seconds,
            user_seconds=evidence.user_seconds,
            sys_seconds=evidence.system_seconds,
            peak_rss_bytes=evidence.peak_rss_bytes,
        )
        self.settings.progress.event(
            phase.name,
            "state",
            detail=f"reused from the baseline cache (it ran in {evidence.elapsed_seconds:.2f} s)",
        )
        return True

    def _wait_for_the_others(self, name: str) -> None:
        """Let every other started phase finish first (each is still awaited as before)."""
        for other in self.phases.values():
            if other.name != name and other.started and other.error is None:
                if other.result is None:
                    self.launcher.wait_for(other.name)

    def checkpoint_path(self, phase: str, run_dir: Path, when: str) -> Path:
        """The case's `checkpoint_path(run_dir)`, checked to be a Path; ERROR naming `when` if not."""
        try:
            checkpoint = self.case.checkpoint_path(run_dir)
            if not isinstance(checkpoint, Path):
                raise TypeError(
                    f"checkpoint_path must return a pathlib.Path, got {type(checkpoint).__name__}"
                )
        except Exception as error:
            raise PhaseError(
                Outcome.ERROR,
                f"{phase} checkpoint path resolution {when} failed: {error_text(error)}",
            ) from None
        return checkpoint

    def shown(self, path: Path) -> str:
        """`path` for a message (failure_text.shown_path)."""
        return shown_path(path, self.settings.run_root, kept=self.settings.preserved)

    def explained(self, phase: TrainingPhase, message: str, *, with_reason: bool = True) -> str:
        """`message` and, on the lines below it, the last lines of the child's stderr.

        A torchrun phase gives each failed rank's own log where torchrun kept one
        (else its tee'd lines are in the phase's stderr); any other phase, its
        stderr as failure_text.explained_failure words it.
        """
        kept = self.settings.preserved
        stderr_path = phase.run_dir / "stderr.log"
        rank_logs = multirank.failed_rank_logs(stderr_path, phase.run_dir)
        if not rank_logs:
            label = f"{phase.name}'s stderr"
            return explained_failure(
                message, label, stderr_path, kept=kept, with_reason=with_reason
            )
        blocks = [
            failure_block(f"rank {rank}'s stderr", log_tail(log), log, kept=kept)
            for rank, log in rank_logs
        ]
        return "\n".join([message, *blocks])

    def ordered_processes(self) -> tuple[ExternalProcessEvidence, ...]:
        """The `processes` evidence in phase order (not the order children happened to end)."""
        order = {name: index for index, name in enumerate(self.phases)}
        return tuple(sorted(self.processes, key=lambda evidence: order[evidence.phase]))

    # Internals ------------------------------------------------------------------------

    def _on_child_event(self, name: str, kind: str, result: ChildResult | None) -> None:
        if name not in self.phases:
            return
        phase = self.phases[name]
        threads = self.settings.threads.describe(phase.ranks, own=phase.extra_env)
        self.settings.progress.event(
            name,
            kind,
            result.wall_seconds if result is not None else None,
            detail=threads if kind == "start" else None,
        )
        if kind == "end":
            phase.result = result
            phase.rank_samples = self.rank_watcher.close(name)  # before the sweep kills them
            multirank.sweep(phase.tag)  # ranks that left the child's process group
            phase.rank_exits = read_rank_exits(phase.exits_file)
            # Ranks too short for any sample: their progress lines, as their agent measured them.
            for event in unsampled_exit_events(name, phase.rank_samples, phase.rank_exits):
                self._on_rank_event(event)

    def _on_rank_event(self, event: RankEvent) -> None:
        """A torchrun rank seen starting or ending: a progress line (from the watcher's thread)."""
        sample = event.sample
        elapsed = sample.last_seen - sample.first_seen if event.kind == "end" else None
        self.settings.progress.event(
            sample.phase, event.kind, elapsed, rank=sample.rank, detail=rank_event_detail(event)
        )

    def _phase_tags(self) -> list[str]:
        return [phase.tag for phase in self.phases.values() if phase.tag is not None]

    def _account(self, phase: TrainingPhase) -> None:
        """Record how a finished child ended, when the decision sequence reaches it.

        Evidence of children that ran early (concurrently) but whose phase the
        verdict never reached is left out, so a report does not depend on
        scheduling.
        """
        result = phase.result
        name = phase.name
        if phase.cached_evidence is not None:
            self.processes.append(phase.cached_evidence)
            self.timings[self.timing_keys.get(name, name)] = result.wall_seconds
            return
        if result.job_state not in (None, "COMPLETED"):
            message = f"{name}'s job {result.job_id} ended {result.job_state}"
            phase.error = PhaseError(Outcome.ERROR, self.explained(phase, message))
            return
        if result.timed_out:
            message = self.explained(phase, timeout_message(name), with_reason=False)
            phase.error = PhaseError(Outcome.ERROR, message)
            return
        returncode = result.returncode
        self.processes.append(
            ExternalProcessEvidence(
                phase=name,
                pid=result.pid,
                elapsed_seconds=result.wall_seconds,
                returncode=returncode,
                signal=result.signal,
                user_seconds=result.user_seconds,
                system_seconds=result.sys_seconds,
                peak_rss_bytes=result.peak_rss_bytes,
                job_id=result.job_id,
                nodes=tuple(
                    NodeProcessEvidence(**row) for row in multirank.node_rows(phase.run_dir)
                ),
                ranks=rank_evidence(
                    phase.rank_samples,
                    phase_returncode=returncode,
                    stderr_path=phase.run_dir / "stderr.log",
                    measured=phase.rank_exits,
                ),
            )
        )
        if returncode != 0:
            self.timings[name] = result.wall_seconds
            message = exit_message(name, returncode)
            details = (
                multirank.node_failure(phase.run_dir),
                multirank.rank_failure(phase.run_dir / "stderr.log", phase.run_dir),
            )
            if any(details):
                message += ": " + "; ".join(detail for detail in details if detail)
            message = self.explained(phase, message)
            hint = foreign_interpreter_hint(
                phase.argv, self.settings.environment, log_tail(phase.run_dir / "stderr.log")
            )
            phase.error = PhaseError(Outcome.ERROR, message + (f"\n{hint}" if hint else ""))
            return
        self.timings[self.timing_keys.get(name, name)] = result.wall_seconds

    def _checkpoint_after(self, phase: TrainingPhase) -> Path:
        try:
            checkpoint = self.checkpoint_path(phase.name, phase.run_dir, "after child completion")
        except PhaseError:
            self.timings.setdefault(phase.name, phase.result.wall_seconds)
            raise
        if not (checkpoint.is_file() or checkpoint.is_dir()):
            self.timings.setdefault(phase.name, phase.result.wall_seconds)
            message = (
                f"{phase.name} did not create its declared checkpoint {self.shown(checkpoint)}; "
                f"the phase directory {self.shown(phase.run_dir)} held: "
                f"{directory_listing(phase.run_dir)}"
            )
            raise PhaseError(Outcome.ERROR, self.explained(phase, message))
        self.checkpoint_max_bytes = max(self.checkpoint_max_bytes, path_bytes(checkpoint))
        return checkpoint


def path_bytes(path: Path) -> int:
    """Size of a checkpoint file, or of every file under a checkpoint directory."""
    if path.is_dir():
        return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())
    return path.stat().st_size


def validated_command(command: object) -> list[str]:
    """The argv a case's command() returned, refused when it is not a non-empty list of str."""
    if isinstance(command, (str, bytes)):
        raise TypeError(
            "command() must return a sequence of str such as [sys.executable, 'train.py'], not one string"
        )
    argv = list(command)  # type: ignore[call-overload]
    if not argv or not all(isinstance(item, str) and "\0" not in item for item in argv):
        raise TypeError("command() must return a non-empty sequence of str without NUL characters")
    return argv
