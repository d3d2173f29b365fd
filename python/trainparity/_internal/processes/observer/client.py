"""The parent's side of the observer worker: start it, send requests, collect snapshot files."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.failure_text import log_tail
from trainparity._internal.processes.group import ChildGroup, ChildLaunchError, ChildSpec
from trainparity._internal.processes.progress import ProgressReporter
from trainparity._internal.state.snapshot import Snapshot
from trainparity._internal.state.snapshot_file import read_snapshot
from trainparity._internal.state.tree_codec import SnapshotFileError

OBSERVER_NAME = "observer"
# How often the parent looks for a result file while children keep running.
_POLL_SECONDS = 0.02
_STOP_GRACE_SECONDS = 5.0


class ObservationFailure(Exception):
    """An observation that did not produce a snapshot; carries the check's verdict."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


@dataclass(frozen=True)
class Observation:
    """A published snapshot and what it cost."""

    snapshot: Snapshot
    seconds: float
    child_timings: dict[str, float]
    file_bytes: int


class ObserverClient:
    """Runs one observer worker in `group` and asks it for one snapshot per phase."""

    def __init__(
        self,
        *,
        group: ChildGroup,
        case_spec: str,
        snapshot_dir: Path,
        cwd: Path,
        environment: dict[str, str],
        timeout: float,
        progress: ProgressReporter,
        case_kind: str = "resume",
        timings: dict[str, float] | None = None,
        on_environment: Callable[[object], None] | None = None,
    ) -> None:
        """`timings` (the check's timing dict) receives `snapshot_<phase>` per observation
        and the worker's own timings (`capture` as `snapshot_capture`), summed.
        `on_environment` receives the environment fingerprint each snapshot records."""
        self.group = group
        self.case_kind = case_kind
        self.case_spec = case_spec
        self.snapshot_dir = snapshot_dir
        self.cwd = cwd
        self.environment = environment
        self.timeout = timeout
        self.progress = progress
        self.requests_fd: int | None = None
        self.launch_failed = False
        self.timings = timings if timings is not None else {}
        self.file_bytes = 0  # of every snapshot file published so far
        self.on_environment = on_environment

    def start(self) -> None:
        """Launch the worker now, so its interpreter start overlaps with training."""
        if self.requests_fd is not None or self.launch_failed:
            return
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        requests = self.snapshot_dir / "requests.fifo"
        try:
            # A preserved work_dir that is reused still holds the last check's FIFO.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(requests)
            os.mkfifo(requests)
            # O_RDWR never blocks on a FIFO (Linux), and keeps it open for the reader.
            self.requests_fd = os.open(requests, os.O_RDWR | os.O_CLOEXEC)
            spec = ChildSpec(
                name=OBSERVER_NAME,
                argv=[
                    sys.executable,
                    "-m",
                    "trainparity._internal.processes.observer",
                    "--case",
                    self.case_spec,
                    "--requests",
                    str(requests),
                    "--case-kind",
                    self.case_kind,
                ],
                cwd=self.cwd,
                env=self.environment,
                stdout_path=self.snapshot_dir / "observer.stdout.log",
                stderr_path=self.snapshot_dir / "observer.stderr.log",
            )
            self.group.start(spec, timeout=None)
        except (ChildLaunchError, OSError, TypeError, ValueError):
            self.launch_failed = True

    def observe(self, phase: str, checkpoint: Path) -> Observation:
        """Snapshot `checkpoint` for `phase`, or raise ObservationFailure with the verdict."""
        began = time.perf_counter()
        self.progress.event(f"snapshot_{phase}", "start")
        self.start()
        if self.launch_failed:
            raise ObservationFailure(
                Outcome.ERROR, f"{phase} checkpoint observation worker launch or timeout failed"
            )
        result_path = self.snapshot_dir / f"{phase}.json"
        snapshot_path = self.snapshot_dir / f"{phase}.safetensors"
        request = {
            "phase": phase,
            "checkpoint": str(checkpoint),
            "snapshot": str(snapshot_path),
            "result": str(result_path),
        }
        # A reused work_dir holds the last check's files: waiting for the result file
        # must not find (and trust) one this request did not produce.
        for stale in (result_path, snapshot_path):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        self._send(request)
        self._await_file(phase, result_path, began + self.timeout)
        record = self._read_record(phase, result_path)
        outcome = record.get("outcome")
        if outcome != Outcome.PASS.value:
            verdict = Outcome.ABSTAIN if outcome == Outcome.ABSTAIN.value else Outcome.ERROR
            raise ObservationFailure(
                verdict, f"{phase} checkpoint observation failed: {record.get('message')}"
            )
        try:
            snapshot, extras = read_snapshot(snapshot_path)
            timings = {key: float(value) for key, value in record["timing_seconds"].items()}
        except (SnapshotFileError, OSError, KeyError, TypeError, ValueError, AttributeError):
            raise ObservationFailure(
                Outcome.ERROR, f"{phase} checkpoint observation worker result was corrupt"
            ) from None
        if self.on_environment is not None:
            self.on_environment(extras["environment"])
        seconds = time.perf_counter() - began
        self.progress.event(f"snapshot_{phase}", "end", seconds)
        observation = Observation(snapshot, seconds, timings, snapshot_path.stat().st_size)
        self._account(phase, observation)
        return observation

    def _account(self, phase: str, observation: Observation) -> None:
        self.timings[f"snapshot_{phase}"] = observation.seconds
        for key, seconds in observation.child_timings.items():
            target = "snapshot_capture" if key == "capture" else key
            self.timings[target] = self.timings.get(target, 0.0) + seconds
        self.file_bytes += observation.file_bytes

    def stop(self) -> None:
        """Ask the worker to exit; the group kills it if it does not within a few seconds."""
        if self.requests_fd is None:
            return
        try:
            if self.group.is_running(OBSERVER_NAME):
                os.write(self.requests_fd, b'{"stop": true}\n')
                self.group.wait_for(OBSERVER_NAME, timeout=_STOP_GRACE_SECONDS)
        finally:
            os.close(self.requests_fd)
            self.requests_fd = None

    def _send(self, request: dict) -> None:
        line = (json.dumps(request) + "\n").encode()
        try:
            os.write(self.requests_fd, line)  # type: ignore[arg-type]
        except OSError:
            raise ObservationFailure(
                Outcome.ERROR,
                f"{request['phase']} checkpoint observation worker launch or timeout failed",
            ) from None

    def _await_file(self, phase: str, result_path: Path, deadline: float) -> None:
        while not result_path.exists():
            if not self.group.is_running(OBSERVER_NAME):
                if result_path.exists():
                    return
                raise ObservationFailure(Outcome.ERROR, self._ended_without_result(phase))
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                self.group.terminate(OBSERVER_NAME)
                raise ObservationFailure(
                    Outcome.ERROR, f"{phase} checkpoint observation worker launch or timeout failed"
                )
            self.group.wait(min(_POLL_SECONDS, remaining))

    def _ended_without_result(self, phase: str) -> str:
        """Why the worker gave no result: how it ended and the last lines of its stderr."""
        message = f"{phase} checkpoint observation worker did not publish a result"
        ended = self.group.result(OBSERVER_NAME)
        if ended is not None:
            how = (
                f"exited with status {ended.exit_code}"
                if ended.exit_code is not None
                else f"was killed by signal {ended.signal}"
            )
            message += f" (the worker {how})"
        # Its lines only, not the log's path: a temporary path would make two reports differ.
        tail = log_tail(self.snapshot_dir / "observer.stderr.log")
        shown = [f"last {len(tail)} lines of the worker's stderr:"] if tail else []
        return "\n".join([message, *shown, *(f"  {line}" for line in tail)])

    @staticmethod
    def _read_record(phase: str, result_path: Path) -> dict:
        try:
            record = json.loads(result_path.read_text(encoding="utf-8"))
            if not isinstance(record, dict):
                raise ValueError("result is not an object")
        except (OSError, ValueError):
            raise ObservationFailure(
                Outcome.ERROR, f"{phase} checkpoint observation worker result was corrupt"
            ) from None
        return record
