"""One crash check's runs: traced baselines, a killed run per crash point, restarts, verdicts.

Layout under the check's run directory: `<name>/run` is the job's {run_dir}
(baseline_a, baseline_b, point-0007, ...); beside it each attempt's
recordings (`records-0`, `records-1`), step log, stdout and stderr, and the
bytes copied at each fsync (`fsync-copies`, power loss only). The job
resumes from what it finds in its checkpoint location, so a restart is the
same command in the same run directory.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.crashes.disk_image import image_digest
from trainparity._internal.crashes.judge import BaselineSteps, RestartJudgement
from trainparity._internal.crashes.points import CrashPoint, crash_points, read_step_log, spread
from trainparity._internal.crashes.power_loss import (
    DATA_LOSS,
    NAME_LOSS,
    PowerLossModel,
    apply_power_loss,
)
from trainparity._internal.distributed.phases import rank_failure
from trainparity._internal.distributed.torchrun_argv import own_port
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.check_runner import RunSettings
from trainparity._internal.processes.child_environment import phase_cwd, phase_environment
from trainparity._internal.processes.failure_text import exception_line, log_tail
from trainparity._internal.processes.traced_job import TracedRun, run_traced
from trainparity._internal.protocols import ProcessExecutionPlan
from trainparity._internal.recording.crash_hook import (
    CRASH_AFTER_STEP_VARIABLE,
    STEP_LOG_VARIABLE,
)
from trainparity._internal.recording.reader import Recording, read_recordings
from trainparity._internal.recording.variables import PHASE_VARIABLE, RECORD_VARIABLE

__all__ = ["CrashExecution", "CrashOutcome"]

PROCESS_CRASH = "process"


class CheckStop(Exception):
    """The check cannot go on: ERROR or ABSTAIN with this message."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


@dataclass(frozen=True)
class _Restart:
    """How the restart from one disk image went (shared by every point with that image)."""

    returncode: int | None
    timed_out: bool
    failure: str | None  # why it could not run to its end
    judgement: RestartJudgement | None
    loaded_files: tuple[str, ...]


@dataclass
class CrashOutcome:
    """What the execution found: the verdict and the report's fields."""

    outcome: Outcome
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


class CrashExecution:
    def __init__(
        self,
        *,
        case: Any,
        policy: Any,
        settings: RunSettings,
        kinds: Sequence[str],
        power_loss: bool,
        max_points: int | None,
        max_lost_steps: int | None,
    ) -> None:
        self.case = case
        self.policy = policy
        self.settings = settings
        self.kinds = tuple(kinds)
        self.power_loss = power_loss
        self.max_points = max_points
        self.max_lost_steps = max_lost_steps
        self.root = settings.run_root
        self.timings: dict[str, float] = {}
        self._lock = threading.Lock()
        self._alone = threading.Lock()  # runs whose launcher binds a port the user fixed
        self._restarts: dict[str, Future[_Restart]] = {}
        self._crash_runs = 0
        self._restart_count = 0
        self.checkpoint_relative = ""

    # Runs of the job ------------------------------------------------------------------

    def _run_dir(self, name: str) -> Path:
        return self.root / name / "run"

    def _job(
        self,
        name: str,
        attempt: int,
        *,
        kill_at: int | None = None,
        crash_step: int | None = None,
        copy_dir: Path | None = None,
        observe_opens: bool = False,
    ) -> TracedRun:
        run_dir = self._run_dir(name)
        run_dir.mkdir(parents=True, exist_ok=True)
        home = run_dir.parent
        plan = ProcessExecutionPlan(
            phase=name,
            cwd=self.settings.command_dir,
            run_dir=run_dir,
            end_step=self.case.total_step,
        )
        argv = list(self.case.command(plan))
        cwd = phase_cwd(self.case, plan)
        environment = phase_environment(self.settings.environment, cwd=cwd, check_cwd=plan.cwd)
        environment.update(
            {
                RECORD_VARIABLE: str(home / f"records-{attempt}"),
                PHASE_VARIABLE: name,
                STEP_LOG_VARIABLE: str(home / f"steps-{attempt}.log"),
                "TMPDIR": str(self._temporary()),
            }
        )
        if crash_step is not None:
            environment[CRASH_AFTER_STEP_VARIABLE] = str(crash_step)
        # torchrun's static rendezvous binds a fixed port: each run gets its own, or (a port the
        # user wrote) the runs go one at a time.
        remedy = own_port(argv, environment)
        if remedy is not None:
            argv = list(remedy.argv)
            environment.update(remedy.environment)
        with self._alone if remedy is not None and remedy.alone else contextlib.nullcontext():
            return self._traced(
                argv, environment, cwd, home, run_dir, attempt, kill_at, copy_dir, observe_opens
            )

    def _traced(
        self,
        argv: list[str],
        environment: dict[str, str],
        cwd: Path,
        home: Path,
        run_dir: Path,
        attempt: int,
        kill_at: int | None,
        copy_dir: Path | None,
        observe_opens: bool,
    ) -> TracedRun:
        return run_traced(
            argv,
            env=environment,
            cwd=cwd,
            stdout_path=home / f"stdout-{attempt}.log",
            stderr_path=home / f"stderr-{attempt}.log",
            root=run_dir,
            kill_at=kill_at,
            copy_dir=copy_dir,
            observe_opens=observe_opens,
            timeout=self.settings.timeout,
            starter=self.settings.starter,
            name=f"{home.name}-{attempt}",
        )

    def _temporary(self) -> Path:
        directory = self.root / "tmp"
        directory.mkdir(exist_ok=True)
        return directory

    def _failure(self, name: str, attempt: int, run: TracedRun) -> str:
        """Why a run did not finish: its exit and its last exception line, paths as {run_dir}."""
        if run.timed_out:
            text = f"did not finish within the timeout ({self.settings.timeout:g} s)"
        elif run.signal is not None:
            text = f"was killed by signal {run.signal}"
        else:
            text = f"exited with status {run.returncode}"
        stderr = self.root / name / f"stderr-{attempt}.log"
        # Under torchrun the agent's own exception says only that a rank failed: name the rank.
        reason = rank_failure(stderr, self._run_dir(name)) or exception_line(log_tail(stderr, 60))
        if reason:
            text += f": {reason}"
        return text.replace(str(self._run_dir(name)), "{run_dir}")

    # The check ------------------------------------------------------------------------

    def run(self) -> CrashOutcome:
        try:
            return self._run()
        except CheckStop as stop:
            return CrashOutcome(stop.outcome, stop.message, self._common_fields())

    def _common_fields(self) -> dict[str, Any]:
        return {
            "crash_runs": self._crash_runs,
            "restarts": self._restart_count,
            "timing_seconds": dict(self.timings),
            "checkpoint_location": self.checkpoint_relative or None,
        }

    def _run(self) -> CrashOutcome:
        self.baseline_steps, baseline_runs = self._baselines()
        events = baseline_runs[0].events
        steps = read_step_log(self.root / "baseline_a" / "steps-0.log")
        found = [
            point
            for point in crash_points(self.kinds, events, steps)
            if point.event is None or _within(point.event.path, self.checkpoint_relative)
        ]
        chosen = spread(found, self.max_points)
        self.settings.progress.note(
            f"{len(found)} crash points found ({_count(found, 'step')} after steps, "
            f"{_count(found, 'save')} inside saves); running {len(chosen)}"
        )
        rows = self._explore(chosen)
        return self._verdict(found, chosen, rows)

    def _baselines(self) -> tuple[BaselineSteps, list[TracedRun]]:
        count = self.policy.baselines if isinstance(self.policy, NoiseComparison) else 2
        names = [f"baseline_{chr(ord('a') + index)}" for index in range(count)]
        runs = self._in_parallel([lambda name=name: self._timed_baseline(name) for name in names])
        for name, run in zip(names, runs, strict=True):
            if run.returncode != 0:
                raise CheckStop(
                    Outcome.ERROR,
                    f"{name}, an uninterrupted run of the job, {self._failure(name, 0, run)}",
                )
        location = self.case.checkpoint_path(self._run_dir("baseline_a"))
        if location.is_file():
            location = location.parent
        if not location.is_dir():
            raise CheckStop(
                Outcome.ERROR,
                "baseline_a did not create its checkpoint location "
                f"{self.case.checkpoint!r}: the crash check needs the directory the job saves in",
            )
        self.checkpoint_relative = str(location.relative_to(self._run_dir("baseline_a")))
        if self.checkpoint_relative == ".":
            self.checkpoint_relative = ""
        recordings = [read_recordings(self.root / name / "records-0") for name in names]
        if not all(recordings):
            raise CheckStop(
                Outcome.ERROR,
                "the job records nothing: the crash check compares what it records. Call "
                "trainparity.record(step, state) right after loading a checkpoint and after "
                "every optimizer step (docs/crashes.md)",
            )
        baselines = BaselineSteps(self.policy, recordings)
        parted = baselines.disagreement()
        if parted is not None:
            step, difference = parted
            hint = (
                ""
                if isinstance(self.policy, NoiseComparison)
                else "; declare a tolerance or NoiseComparison() if the job is not deterministic"
            )
            raise CheckStop(
                Outcome.ABSTAIN,
                f"two uninterrupted runs differ at step {step} ({difference.path}): a restart "
                f"cannot be judged against them{hint}",
            )
        return baselines, runs

    def _timed_baseline(self, name: str) -> TracedRun:
        self.settings.progress.event(name, "start")
        run = self._job(name, 0)
        self.timings[name] = run.wall_seconds
        self.settings.progress.event(name, "end", run.wall_seconds)
        return run

    def _in_parallel(self, work: Sequence[Callable[[], Any]]) -> list[Any]:
        workers = 2 if self.settings.parallel else 1
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda job: job(), work))

    # Crash points ---------------------------------------------------------------------

    def _explore(self, chosen: Sequence[CrashPoint]) -> list[dict[str, Any]]:
        """Every chosen point's rows: one crash run per image class, restarts per distinct image."""
        representatives: dict[int, int] = {}
        for index, point in enumerate(chosen):
            representatives.setdefault(point.image_class, index)
        ordered = sorted(set(representatives.values()))
        started = time.perf_counter()
        results = self._in_parallel(
            [
                lambda index=index, position=position: self._point(
                    chosen[index], f"point-{index:04d}", position, len(ordered)
                )
                for position, index in enumerate(ordered, start=1)
            ]
        )
        self.timings["crash_points"] = time.perf_counter() - started
        by_class = {
            chosen[index].image_class: result
            for index, result in zip(ordered, results, strict=True)
        }
        rows: list[dict[str, Any]] = []
        first_with_image: dict[str, str] = {}
        for point in chosen:
            for variant in by_class[point.image_class]:
                rows.append(self._row(point, variant, first_with_image))
        return rows

    def _point(
        self, point: CrashPoint, name: str, position: int, total: int
    ) -> list[dict[str, Any]]:
        """Crash the job at `point`, then restart it from each image (process crash, power loss)."""
        self.settings.progress.event(name, "start", detail=f"{position}/{total} {point.name}")
        began = time.perf_counter()
        copies = self.root / name / "fsync-copies" if self.power_loss and point.event else None
        if copies is not None:
            copies.mkdir(parents=True, exist_ok=True)
        run = self._job(
            name,
            0,
            kill_at=point.seq,
            crash_step=point.after_step if point.kind == "step" else None,
            copy_dir=copies,
        )
        with self._lock:
            self._crash_runs += 1
        # The end point's run is not killed: it finishes, and is restarted as a finished job.
        died = run.killed or run.signal == 9 or (point.kind == "end" and run.returncode == 0)
        if not died:
            variant = {"loss": PROCESS_CRASH, "reached": False}
            if run.returncode != 0:
                variant["error"] = f"the run to this point {self._failure(name, 0, run)}"
            self.settings.progress.event(name, "end", time.perf_counter() - began)
            return [variant]
        variants = [PROCESS_CRASH]
        if copies is not None:
            variants += [DATA_LOSS, NAME_LOSS]
        run_dir = self._run_dir(name)
        pristine = self.root / name / "crashed"
        if len(variants) > 1:
            shutil.copytree(run_dir, pristine, symlinks=True)
        found: list[dict[str, Any]] = []
        for number, loss in enumerate(variants):
            if number > 0:
                shutil.rmtree(run_dir)
                shutil.copytree(pristine, run_dir, symlinks=True)
                model = PowerLossModel.replay(run.events, copies)  # type: ignore[arg-type]
                apply_power_loss(model, run_dir, loss, self.root / name / "scratch")
            digest = image_digest(run_dir)
            restart = self._restart_once(digest, name, number + 1)
            found.append({"loss": loss, "reached": True, "image": digest, "restart": restart})
        self.settings.progress.event(name, "end", time.perf_counter() - began)
        return found

    def _restart_once(self, digest: str, name: str, attempt: int) -> _Restart:
        """The restart from image `digest`: run here the first time, shared after."""
        with self._lock:
            pending = self._restarts.get(digest)
            owner = pending is None
            if owner:
                pending = self._restarts[digest] = Future()
        assert pending is not None
        if not owner:
            return pending.result()
        try:
            restart = self._restart(name, attempt)
        except BaseException as error:
            pending.set_exception(error)
            raise
        pending.set_result(restart)
        return restart

    def _restart(self, name: str, attempt: int) -> _Restart:
        with self._lock:
            self._restart_count += 1
        run = self._job(name, attempt, observe_opens=True)
        loaded = _loaded_files(run, self.checkpoint_relative)
        if run.returncode != 0:
            return _Restart(
                run.returncode, run.timed_out, self._failure(name, attempt, run), None, loaded
            )
        records: dict[int, Recording] = read_recordings(self.root / name / f"records-{attempt}")
        return _Restart(0, False, None, self.baseline_steps.judge(records), loaded)

    # Rows and the verdict -------------------------------------------------------------

    def _row(
        self,
        point: CrashPoint,
        variant: dict[str, Any],
        first_with_image: dict[str, str],
    ) -> dict[str, Any]:
        event = point.event
        row: dict[str, Any] = {
            "point": point.name,
            "kind": point.kind,
            "after_step": point.after_step,
            "seq": point.seq,
            "op": None if event is None else event.op,
            "path": None if event is None else event.path,
            "offset": None if event is None or event.offset < 0 else event.offset,
            "length": None if event is None or event.length < 0 else event.length,
            "loss": variant["loss"],
        }
        if not variant["reached"]:
            row.update(verdict="ERROR" if "error" in variant else "NOT_REACHED")
            row["detail"] = variant.get(
                "error",
                "the run finished without reaching this point (the calls of a save came in another order)",
            )
            return row
        digest = variant["image"]
        own = f"{point.name} [{variant['loss']}]"
        first = first_with_image.setdefault(digest, own)
        row["image"] = digest[:16]
        if first != own:
            row["same_image_as"] = first
        restart: _Restart = variant["restart"]
        row["loaded"] = list(restart.loaded_files)
        if restart.failure is not None:
            row["verdict"] = "ERROR" if restart.timed_out else "FAIL"
            row["detail"] = f"the restart cannot start: it {restart.failure}"
            return row
        judgement = restart.judgement
        assert judgement is not None
        row["loaded_step"] = judgement.loaded_step
        if judgement.loaded_step is None:
            row["verdict"] = "ERROR"
            row["detail"] = (
                "the restart recorded nothing: record() right after loading (docs/crashes.md)"
            )
            return row
        done = point.after_step if point.after_step is not None else 0
        row["steps_redone"] = max(0, done - judgement.loaded_step)
        final = self.baseline_steps.last_step()
        if judgement.divergence is not None:
            row.update(verdict="FAIL", detail=judgement.divergence)
            row["difference"] = judgement.difference
        elif judgement.last_step != final:
            row.update(
                verdict="FAIL",
                detail=f"the restart ended at step {judgement.last_step}, the uninterrupted run at {final}",
            )
        elif self.max_lost_steps is not None and row["steps_redone"] > self.max_lost_steps:
            row.update(
                verdict="FAIL",
                detail=f"{row['steps_redone']} steps lost, more than max_lost_steps={self.max_lost_steps}",
            )
        else:
            row.update(verdict="PASS", detail="restarts to the uninterrupted result")
        return row

    def _verdict(
        self, found: Sequence[CrashPoint], chosen: Sequence[CrashPoint], rows: list[dict[str, Any]]
    ) -> CrashOutcome:
        images = {row["image"] for row in rows if "image" in row}
        redone = [row["steps_redone"] for row in rows if "steps_redone" in row]
        fields = {
            **self._common_fields(),
            "crash_points": tuple(rows),
            "points_found": len(found),
            "points_run": len(chosen),
            "distinct_images": len(images),
            "max_steps_redone": max(redone) if redone else None,
        }
        failing = next((row for row in rows if row["verdict"] == "FAIL"), None)
        if failing is not None:
            fields["first_failing_point"] = failing["point"]
            loss = "" if failing["loss"] == PROCESS_CRASH else f", power loss ({failing['loss']})"
            if failing.get("difference") is not None:
                fields["primary_difference"] = failing["difference"]
                fields["all_differences"] = (failing["difference"],)
            return CrashOutcome(
                Outcome.FAIL, f"crash point {failing['point']}{loss}: {failing['detail']}", fields
            )
        error = next((row for row in rows if row["verdict"] == "ERROR"), None)
        if error is not None:
            return CrashOutcome(
                Outcome.ERROR, f"crash point {error['point']}: {error['detail']}", fields
            )
        if not rows:
            return CrashOutcome(
                Outcome.ERROR,
                "no crash point found: the job recorded one step only and made no file-system "
                "call in its checkpoint location",
                fields,
            )
        reached = sum(1 for row in rows if row["verdict"] == "PASS")
        budget = (
            "" if len(chosen) == len(found) else f" (max_points: {len(chosen)} of {len(found)})"
        )
        message = (
            f"every crash point restarts to the uninterrupted result: {len(chosen)} points{budget}, "
            f"{len(images)} distinct disk images, {self._restart_count} restarts"
        )
        if redone:
            message += f"; at most {max(redone)} steps redone"
        if reached < len(rows):
            message += f"; {len(rows) - reached} points not reached"
        return CrashOutcome(Outcome.PASS, message, fields)


def _within(path: str, location: str) -> bool:
    return not location or path == location or path.startswith(location + "/")


def _count(points: Sequence[CrashPoint], kind: str) -> int:
    return sum(1 for point in points if point.kind == kind)


def _loaded_files(run: TracedRun, location: str) -> tuple[str, ...]:
    """The files under the checkpoint location that the restart read and had not written itself."""
    written: set[str] = set()
    seen: list[str] = []
    for event in sorted(run.events, key=lambda e: e.time_ns):
        if event.seq >= 0:
            if event.changes_image():
                written.update(path for path in (event.path, event.target) if path is not None)
            continue
        if _within(event.path, location) and event.path not in written and event.path not in seen:
            seen.append(event.path)
    return tuple(seen)
