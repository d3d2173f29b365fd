"""`trainparity snapshot`: record a snapshot file of a checkpoint or of what a callable observes."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainparity._internal.cli import common
from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.html_views import result_html
from trainparity._internal.reports.machine import report_dict
from trainparity._internal.reports.text_views import result_repr

EXAMPLE = """\
python -c "import torch; torch.save({'weight': torch.ones(2, 3), 'step': 7}, 'checkpoint.pt')"
trainparity snapshot --checkpoint checkpoint.pt --output here.safetensors
"""


@dataclass(frozen=True)
class SnapshotRecording:
    """The outcome of recording one snapshot file (PASS: written)."""

    outcome: Outcome
    message: str
    snapshot: str
    source: str
    file_bytes: int = 0
    tensor_count: int = 0
    tensor_bytes: int = 0
    includes_values: bool = True
    environment: dict[str, Any] | None = None

    __repr__ = result_repr
    _repr_html_ = result_html

    def to_dict(self) -> dict[str, Any]:
        return report_dict(self)


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "snapshot",
        output_parent,
        summary="Record a snapshot file (tensors, values, environment) to diff with one from elsewhere.",
        example=EXAMPLE,
        run=run,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--checkpoint",
        type=Path,
        metavar="PATH",
        help="a torch.save file (loaded with weights_only=True on the CPU) or a .safetensors file",
    )
    source.add_argument(
        "--call",
        metavar="MODULE:CALLABLE",
        help="import and call it without arguments; it returns the mapping to record",
    )
    parser.add_argument(
        "-o", "--output", type=Path, required=True, metavar="PATH", help="snapshot file to write"
    )
    parser.add_argument("--step", type=int, help="training step to record with the snapshot")
    parser.add_argument(
        "--digest-only",
        action="store_true",
        help="record digests instead of values: a few kilobytes, says which tensors differ, not how",
    )
    parser.add_argument(
        "--cwd", type=Path, help="directory to import --call's module from (default: .)"
    )


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.environment import environment_fingerprint
    from trainparity._internal.state.freeze import UnsupportedStateError
    from trainparity._internal.state.normalize import normalize_observation
    from trainparity._internal.state.snapshot_file import write_snapshot

    source = str(arguments.checkpoint) if arguments.checkpoint is not None else arguments.call
    fields: dict[str, Any] = {"snapshot": str(arguments.output), "source": source}
    try:
        observed = (
            _load_checkpoint(arguments.checkpoint)
            if arguments.checkpoint is not None
            else _call(arguments)
        )
    except common.UsageError:
        raise
    except _NotACheckpoint as error:
        return _recorded(Outcome.ERROR, f"{source} could not be observed: {error}", fields)
    except Exception as error:
        return _recorded(
            Outcome.ERROR, f"{source} could not be observed: {error_text(error)}", fields
        )
    environment = environment_fingerprint(initialize_cuda=True)
    try:
        normalized = normalize_observation(observed)
        if not isinstance(normalized, dict):
            raise UnsupportedStateError((), f"{type(observed).__name__} is not a mapping")
        info = write_snapshot(
            arguments.output,
            normalized,
            step=arguments.step,
            environment=environment,
            include_values=not arguments.digest_only,
        )
    except UnsupportedStateError as error:
        return _recorded(Outcome.ABSTAIN, f"snapshot state is unsupported: {error}", fields)
    except OSError as error:
        return _recorded(
            Outcome.ERROR, f"snapshot could not be written: {error_text(error)}", fields
        )
    kind = "values" if info.includes_values else "digests only"
    recording = SnapshotRecording(
        outcome=Outcome.PASS,
        message=f"snapshot recorded: {info.tensor_count} tensor(s), {info.file_bytes} bytes, {kind}",
        file_bytes=info.file_bytes,
        tensor_count=info.tensor_count,
        tensor_bytes=info.tensor_bytes,
        includes_values=info.includes_values,
        environment=environment,
        **fields,
    )
    return common.result_output(recording, report_written=False)


def _recorded(outcome: Outcome, message: str, fields: dict[str, Any]) -> common.CommandOutput:
    return common.result_output(
        SnapshotRecording(outcome=outcome, message=message, **fields), report_written=False
    )


def _load_checkpoint(path: Path) -> Any:
    common.require_regular_file(path, "--checkpoint")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise common.UsageError(
                "reading .safetensors checkpoints needs the safetensors package: pip install safetensors"
            ) from None
        return load_file(str(path), device="cpu")
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError:
        raise  # missing or unreadable: the error says so already
    except Exception as error:
        # torch's own errors for a file it cannot parse (`KeyError: 101` for text) say
        # nothing about why; name the likely cause and keep torch's words after it.
        raise _NotACheckpoint(
            f"torch.load(weights_only=True) could not read it ({error_text(error)}); "
            "give a file written by torch.save, or a .safetensors file"
        ) from error


class _NotACheckpoint(Exception):
    """The checkpoint file exists but torch.load cannot read it."""


def _call(arguments: argparse.Namespace) -> Any:
    module_name, separator, attribute = arguments.call.partition(":")
    if not separator or not module_name or not attribute:
        raise common.UsageError(f"--call expects MODULE:CALLABLE, got {arguments.call!r}")
    common.command_directory(arguments)
    target = getattr(importlib.import_module(module_name), attribute)
    if not callable(target):
        raise common.UsageError(f"--call {arguments.call}: {type(target).__name__} is not callable")
    return target()
