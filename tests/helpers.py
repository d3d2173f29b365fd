"""Small builders shared by the tests."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

from trainparity._internal.distributed.torchrun_argv import torchrun_command
from trainparity._internal.native.core import core
from trainparity._internal.state.freeze import freeze
from trainparity._internal.state.snapshot import Snapshot


def snapshot_of(state: dict, *, step: int | None = 0, **fields) -> Snapshot:
    """A snapshot of `state` frozen with the reference freezer (ANCHOR_CASES §4 helper)."""
    return Snapshot(step=step, state=freeze(state), **fields)


def extra_pair(left, right) -> tuple[Snapshot, Snapshot]:
    """Snapshots of `{"extra": left}` and `{"extra": right}`."""
    return snapshot_of({"extra": left}), snapshot_of({"extra": right})


def rewrite_as_digest_version_1(
    path: Path, tensor_bytes: dict[str, bytes] | None = None, *, manifest_digest: bool = True
) -> Path:
    """Rewrites a snapshot file as trainparity wrote it with digest version 1.

    Tensor digests are recomputed with version 1 from the file's own bytes, or
    from `tensor_bytes` (name -> bytes) for a digest-only file; the manifest
    digest likewise, or left out (`manifest_digest=False`: files from before it existed).
    """
    raw = path.read_bytes()
    (header_length,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8 : 8 + header_length])
    data = raw[8 + header_length :]
    manifest = json.loads(header["__metadata__"]["trainparity"])
    manifest["digest_version"] = 1
    for entry in manifest["tensors"]:
        if tensor_bytes is not None:
            content = tensor_bytes[entry["name"]]
        else:
            begin, end = header[entry["name"]]["data_offsets"]
            content = data[begin:end]
        entry["digest"] = core.digest(content, version=1).hex()
    manifest_text = json.dumps(manifest, sort_keys=True)
    header["__metadata__"] = {"trainparity": manifest_text}
    if manifest_digest:
        header["__metadata__"]["trainparity_digest"] = core.digest(
            manifest_text.encode(), version=1
        ).hex()
    encoded = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    encoded += b" " * (-(8 + len(encoded)) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    return path


def set_manifest(metadata: dict, manifest_text: str) -> None:
    """Put a (possibly faulty) manifest into a header's `__metadata__`, signed as a writer would.

    Tests of the manifest parser use it so that their edits reach the parser
    instead of stopping at the manifest digest check (which the damage tests cover).
    """
    metadata["trainparity"] = manifest_text
    metadata["trainparity_digest"] = core.digest(
        manifest_text.encode("utf-8", errors="surrogatepass"), version=core.DIGEST_VERSION
    ).hex()


def run_torchrun_job(job: Path, arguments: list[str], *, ranks: int, out: Path, logs: Path) -> None:
    """One real torchrun job (gloo, one thread per rank, temporary files under `out`); must exit 0."""
    completed = subprocess.run(
        torchrun_command([str(job), *arguments], nproc_per_node=ranks, log_dir=logs),
        env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]


def compared_part(result, not_compared: tuple[str, ...]) -> dict:
    """The report of `result` without the keys `not_compared` and the environment's
    `child_start`: what differs from run to run or between start modes."""
    report = result.to_dict()
    kept = {key: value for key, value in report.items() if key not in not_compared}
    kept["environment"] = {
        key: value for key, value in report["environment"].items() if key != "child_start"
    }
    return kept


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (parent links read from /proc), zombies included."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended while we looked
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, pending = set(), [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found
