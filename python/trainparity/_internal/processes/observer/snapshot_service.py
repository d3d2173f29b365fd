"""The observer worker: a fresh interpreter that turns resume checkpoints into snapshot files.

Launched by check_resume as `python -m trainparity._internal.processes.observer --case SPEC
--requests FIFO`. It loads the case once, then serves one request per line
read from the FIFO: call `observe_checkpoint`, normalise, freeze and write
the snapshot file, then publish a small JSON result next to it atomically
(the parent waits for that file). The user's training processes never see
it, so one observer can serve every phase of a check while the training
children stay fresh.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome

# What the default observer of a command case reads (cases/command_case.py observe_default),
# said when it cannot read a checkpoint: the way out is an observer of the user's own.
_HINT_MARK = "observe='module:function'"
DEFAULT_OBSERVER_HINT = (
    "the default observer reads a DCP directory (load_dcp), a ZeRO checkpoint directory "
    "(a latest file and its tag directory), a .safetensors file or directory of them, "
    "or a file that "
    "torch.load(weights_only=True) reads as a dict; for any other checkpoint pass "
    f"{_HINT_MARK} (--observe), a function that returns the state to compare"
)


def observe_one(
    case: Any, load_error: BaseException | None, request: dict[str, Any]
) -> dict[str, Any]:
    """Produce the result record of one observation request (its outcomes: docs/compatibility.md, "check_resume")."""
    from trainparity._internal.state.file_ranges import checkpoint_files
    from trainparity._internal.state.freeze import UnsupportedStateError
    from trainparity._internal.state.normalize import StableStateError, normalize_observation
    from trainparity._internal.state.snapshot_file import write_snapshot

    if load_error is not None:
        return _failure(Outcome.ERROR, f"process case loading failed: {error_text(load_error)}")
    started = time.perf_counter()
    try:
        observation = case.observe_checkpoint(Path(request["checkpoint"]))
    except Exception as error:  # the user's callback: any failure is the check's ERROR
        # The whole traceback goes to observer.stderr.log (kept under work_dir); the
        # message carries `Type: text`, which is what a user reads first.
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        return _failure(
            Outcome.ERROR,
            f"observe_checkpoint callback failed: {_with_hint(error_text(error), case)}",
        )
    captured = time.perf_counter()
    try:
        normalized = normalize_observation(observation)
        if not isinstance(normalized, dict):
            raise UnsupportedStateError(
                (), f"observation root is a {type(observation).__name__}, not a mapping"
            )
        checkpoint = Path(request["checkpoint"])
        info = write_snapshot(
            request["snapshot"],
            normalized,
            step=case.total_step,
            environment=_environment(),
            # Tensors still mapped from the checkpoint file or the files of a checkpoint
            # directory (torch.load(mmap=True), safetensors, DCP shards) are recorded as
            # references to them, not copied (state/snapshot_references.py).
            reference_files=checkpoint_files(checkpoint),
        )
    except (UnsupportedStateError, StableStateError) as error:
        # The contract's message names the type only; the path is what a user needs next.
        return _failure(Outcome.ABSTAIN, f"snapshot state is unsupported: {error_text(error)}")
    except Exception as error:
        return _failure(Outcome.ERROR, f"snapshot worker failed: {error_text(error)}")
    written = time.perf_counter()
    return {
        "outcome": Outcome.PASS.value,
        "message": "checkpoint observed",
        "snapshot": str(request["snapshot"]),
        "snapshot_bytes": info.file_bytes,
        "referenced_bytes": info.referenced_bytes,
        "timing_seconds": {"capture": captured - started, "serialization": written - captured},
    }


@functools.cache
def _environment() -> dict[str, Any]:
    """This worker's fingerprint, recorded in every snapshot it writes (computed once)."""
    from trainparity._internal.environment import environment_fingerprint

    return environment_fingerprint()


def _warm_up() -> None:
    """Import what an observation needs now, while the phases train.

    The worker starts with the check; without this its first observation
    paid for importing torch and the snapshot writer (most of the 0.94 GiB
    benchmark's first 1.0 s snapshot, against 0.24 s for the second), on the
    check's critical path. The environment fingerprint is still taken at
    the first observation: one that initialises CUDA gets its CUDA facts.
    """
    try:
        import torch  # noqa: F401 - the default observer's and the writer's

        import trainparity._internal.state.normalize  # noqa: F401
        import trainparity._internal.state.snapshot_file  # noqa: F401
    except Exception:  # noqa: S110 - the observation that needs them reports it as its ERROR
        pass


def _with_hint(text: str, case: Any) -> str:
    """`text`, and for the default observer of a command case what it reads and how to
    read a checkpoint some other way (unless the text already says so)."""
    from trainparity._internal.cases.command_case import CommandCase

    if not isinstance(case, CommandCase) or case.observe is not None or _HINT_MARK in text:
        return text
    # A message of several lines (torch.load's refusal) keeps its lines; the hint follows them.
    separator = "\n" if "\n" in text else "; "
    return f"{text}{separator}{DEFAULT_OBSERVER_HINT}"


def _failure(outcome: Outcome, message: str) -> dict[str, Any]:
    return {"outcome": outcome.value, "message": message}


def write_result(path: str, record: dict[str, Any]) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as stream:
        json.dump(record, stream, sort_keys=True)
    os.replace(temporary, path)


def serve(case_spec: str, requests_path: str, case_kind: str = "resume") -> None:
    from trainparity._internal.cases.command_case import COMMAND_CASE_PREFIX, CommandCase
    from trainparity._internal.cases.loading import load_process_case, load_runs_case

    case: Any = None
    load_error: BaseException | None = None
    try:
        if case_spec.startswith(COMMAND_CASE_PREFIX):
            case = CommandCase.from_spec(case_spec)
        else:
            case = (load_runs_case if case_kind == "runs" else load_process_case)(case_spec)
    except Exception as error:
        load_error = error
    if load_error is None:
        _warm_up()
    with open(requests_path, encoding="utf-8") as requests:
        for line in requests:
            request = json.loads(line)
            if request.get("stop"):
                break
            write_result(request["result"], observe_one(case, load_error, request))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainparity._internal.processes.observer", description=__doc__
    )
    parser.add_argument("--case", required=True)
    parser.add_argument("--case-kind", choices=("resume", "runs"), default="resume")
    parser.add_argument("--requests", required=True)
    arguments = parser.parse_args(argv)
    serve(arguments.case, arguments.requests, arguments.case_kind)
    return 0
