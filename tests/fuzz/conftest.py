"""Seed files for the fuzzers: real snapshot and ID files written by trainparity itself, once per session."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy
import pytest
import torch
from trainparity._internal.state.file_ranges import FilePiece, register_pieces
from trainparity._internal.state.snapshot_file import write_snapshot


@dataclass(frozen=True)
class Seeds:
    """Seed files by name, and fresh paths for mutated copies."""

    directory: Path
    files: dict[str, Path]

    def fresh_path(self, suffix: str) -> Path:
        """A new file name for each input: a memory-mapped file is never rewritten in place."""
        return self.directory / f"mutant-{next(_COUNTER)}{suffix}"


_COUNTER = itertools.count()


def _training_state(shift: float = 0.0) -> dict:
    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(2, 3, generator=generator) + shift
    return {
        "model": {
            "weight": weight,
            "bias": torch.randn(3, generator=generator, dtype=torch.float64),
            "half": torch.randn(4, generator=generator).half(),
            "brain": torch.randn(2, generator=generator).bfloat16(),
        },
        "optimizer": {
            "state": {"0": {"step": torch.tensor(3.0), "exp_avg": weight * 0.1}},
            "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0]}],
        },
        "extra": {
            "int8": torch.arange(-3, 3, dtype=torch.int8),
            "uint8": torch.arange(4, dtype=torch.uint8),
            "int64": torch.arange(5),
            "flags": torch.tensor([True, False]),
            "complex64": torch.randn(2, generator=generator, dtype=torch.complex64),
            "complex128": torch.randn(2, generator=generator, dtype=torch.complex128),
            "float8": torch.randn(3, generator=generator).to(torch.float8_e4m3fn),
            "empty": torch.empty(0, 2),
            "scalar": torch.tensor(1.5),
            "text": "s",
            "bytes": b"\x00\xff",
            "none": None,
            "nan": float("nan"),
            "big": 2**70,
            "negative": -1,
            "yes": True,
            "nested": [[1, (2, 3.0)], {"k": []}],
        },
    }


@pytest.fixture(scope="session")
def snapshot_seeds(tmp_path_factory) -> Seeds:
    """`full` (values), `shifted` (one tensor differs), `digest` (digest-only), `tiny`,
    `referenced` (`full`'s state as references to a torch.save checkpoint: format 2),
    `pieced` (`full`'s state as references of two pieces each to a file: format 3)."""
    directory = tmp_path_factory.mktemp("snapshot-seeds")
    files = {
        "full": directory / "full.safetensors",
        "shifted": directory / "shifted.safetensors",
        "digest": directory / "digest.safetensors",
        "tiny": directory / "tiny.safetensors",
        "referenced": directory / "referenced.safetensors",
        "pieced": directory / "pieced.safetensors",
    }
    write_snapshot(files["full"], _training_state(), step=5)
    # The checkpoint lives outside the seeds' folder, which holds snapshot files only.
    checkpoint = tmp_path_factory.mktemp("snapshot-checkpoint") / "checkpoint.pt"
    torch.save(_training_state(), checkpoint)
    mapped = torch.load(checkpoint, weights_only=True, mmap=True)
    info = write_snapshot(files["referenced"], mapped, step=5, reference_files=[checkpoint])
    assert info.referenced_bytes > 0
    pieces_file = tmp_path_factory.mktemp("snapshot-pieces") / "pieces.bin"
    pieced = _assembled_from_pieces(_training_state(), pieces_file)
    info = write_snapshot(files["pieced"], pieced, step=5, reference_files=[pieces_file])
    assert info.referenced_bytes > 0
    write_snapshot(files["shifted"], _training_state(1e-3), step=5)
    write_snapshot(files["digest"], _training_state(), step=5, include_values=False)
    write_snapshot(files["tiny"], {"w": torch.ones(2), "n": 1}, step=None)
    return Seeds(directory, files)


def _assembled_from_pieces(state: dict, file: Path) -> dict:
    """`state` with each tensor replaced by a copy whose bytes lie in `file` as two pieces,
    the second half first (as a loader that assembles shards registers them)."""
    blob = bytearray()
    pieces_of = []

    def assembled(value):
        if isinstance(value, dict):
            return {key: assembled(item) for key, item in value.items()}
        if not isinstance(value, torch.Tensor):
            return value
        copy = value.clone()
        raw = copy.reshape(-1).view(torch.uint8).numpy().tobytes() if copy.numel() else b""
        if raw:
            half = max(1, len(raw) // 2)
            second = (len(blob) + 3, len(raw) - half)  # 3 bytes of gap: unaligned on purpose
            blob.extend(b"\x5a" * 3 + raw[half:])
            first = (len(blob) + 1, half)
            blob.extend(b"\xa5" + raw[:half])
            ranges = [first] + ([second] if second[1] else [])
            pieces_of.append((copy, [FilePiece(str(file), *piece) for piece in ranges]))
        return copy

    result = assembled(state)
    file.write_bytes(bytes(blob))
    for tensor, pieces in pieces_of:
        register_pieces(tensor, pieces)
    return result


@pytest.fixture(scope="session")
def id_seeds(tmp_path_factory) -> Seeds:
    """`.npy` files (format 1.0 and 2.0, empty, int64 extremes) and raw little-endian int64 files."""
    directory = tmp_path_factory.mktemp("id-seeds")
    arrays = {
        "range": numpy.arange(6, dtype="<i8"),
        "empty": numpy.zeros(0, dtype="<i8"),
        "extremes": numpy.array([2**63 - 1, -(2**63), 0, 3], dtype="<i8"),
    }
    files = {}
    for name, values in arrays.items():
        files[f"{name}.npy"] = directory / f"{name}.npy"
        numpy.save(files[f"{name}.npy"], values)
        files[f"{name}.bin"] = directory / f"{name}.bin"
        files[f"{name}.bin"].write_bytes(values.tobytes())
    files["v2.npy"] = directory / "v2.npy"
    with open(files["v2.npy"], "wb") as stream:
        numpy.lib.format.write_array(stream, arrays["range"], version=(2, 0))
    return Seeds(directory, files)
