"""Snapshot files: one file in the safetensors layout, written and memory-mapped by our own code.

Layout: 8-byte little-endian header length N, N bytes of JSON header (padded
with spaces so tensor bytes start 8-byte aligned), then the raw tensor bytes
back to back. The header maps each tensor name (its rendered state path) to
`{"dtype", "shape", "data_offsets"}` and holds our manifest as a JSON string
in `__metadata__["trainparity"]`: schema, step, backend, the frozen tree of
non-tensor values with tensor leaves as references, per-tensor metadata and
digest, and the environment fingerprint. Nothing is ever unpickled.

Integrity: `__metadata__["trainparity_digest"]` holds the digest of the
manifest string itself, so with the per-tensor digests every byte that a
verdict can rely on is covered. `read_snapshot` checks both before it returns
(unless the caller vouches for the file with `trust_digests=True`), so bit rot,
a bad copy or a hand edit is an error, never a silent PASS.

References: a tensor mapped from a checkpoint file (format 2) or assembled
from pieces of such files (format 3) may be recorded as a reference to those
bytes instead of a copy (snapshot_references.py).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.error_text import error_text
from trainparity._internal.native.core import core
from trainparity._internal.native.cuda import (
    core_threads,
    digest_buffer,
    iter_host_blocks,
    write_buffer,
)
from trainparity._internal.native.dtypes import info_for_text
from trainparity._internal.state.file_ranges import MappedFileLocator
from trainparity._internal.state.freeze import (
    FrozenMapping,
    FrozenTensor,
    UnsupportedStateError,
    freeze,
)
from trainparity._internal.state.input_files import special_file_kind
from trainparity._internal.state.snapshot import (
    REFERENCE_BACKEND,
    SNAPSHOT_SCHEMA_VERSION,
    Snapshot,
)
from trainparity._internal.state.snapshot_references import (
    VERIFY_BLOCK_BYTES,
    CheckpointMaps,
    confirmed_reference,
    reference_entry,
    release_pages,
)
from trainparity._internal.state.tree_codec import (
    SnapshotFileError,
    decode_tree,
    encode_tree,
    placement_entry,
    placement_of_entry,
)

__all__ = [
    "SNAPSHOT_FILE_FORMAT",
    "SNAPSHOT_PIECES_FORMAT",
    "SNAPSHOT_REFERENCES_FORMAT",
    "SnapshotFileError",
    "SnapshotFileInfo",
    "decode_tree",
    "encode_tree",
    "read_snapshot",
    "write_snapshot",
]

SNAPSHOT_FILE_FORMAT = "trainparity-snapshot/1"
# A snapshot with at least one tensor recorded as a reference to a checkpoint file.
SNAPSHOT_REFERENCES_FORMAT = "trainparity-snapshot/2"
# A snapshot with at least one tensor recorded as a reference of several file pieces.
SNAPSHOT_PIECES_FORMAT = "trainparity-snapshot/3"
_READABLE_FORMATS = (SNAPSHOT_FILE_FORMAT, SNAPSHOT_REFERENCES_FORMAT, SNAPSHOT_PIECES_FORMAT)
_METADATA_KEY = "trainparity"
_MANIFEST_DIGEST_KEY = "trainparity_digest"
_MAX_HEADER_BYTES = 512 << 20
_MAX_ENVIRONMENT_DEPTH = 16


@dataclass(frozen=True)
class SnapshotFileInfo:
    """What writing a snapshot produced."""

    path: Path
    file_bytes: int
    tensor_count: int
    tensor_bytes: int
    includes_values: bool
    referenced_bytes: int = 0  # of tensors recorded as references to checkpoint files


# Writing ------------------------------------------------------------------------------


def write_snapshot(
    path: str | os.PathLike[str],
    state: Mapping[str, object] | FrozenMapping,
    *,
    step: int | None = None,
    backend: str = REFERENCE_BACKEND,
    environment: Mapping[str, Any] | None = None,
    include_values: bool = True,
    reference_files: Sequence[str | os.PathLike[str]] = (),
) -> SnapshotFileInfo:
    """Freeze `state` and write it to `path` atomically (temp file, fsync, rename).

    Tensor bytes stream from the live tensors to the file without an
    intermediate copy (non-contiguous CPU tensors are made contiguous one at a
    time; CUDA tensors are digested on the GPU and copied to the file through
    bounded host buffers, never whole). With include_values=False only the manifest and
    digests are written: a few kilobytes that still tell which tensors differ.
    `environment` is the fingerprint recorded in the file; None records this
    process's environment_fingerprint() (pass the children's, or one taken
    with initialize_cuda=True, to record those instead).
    `reference_files`: files the state was memory-mapped from; a tensor whose
    memory is one of their byte ranges, and whose bytes there still digest
    to the tensor's, is recorded as a reference to that range, not copied
    (include_values=True and an unfrozen `state` only).
    Raises UnsupportedStateError (naming the path) for values that cannot be frozen.
    """
    target = Path(path)
    if isinstance(state, FrozenMapping):
        frozen: Any = state
    else:
        locator = MappedFileLocator(reference_files) if reference_files and include_values else None
        frozen = freeze(state, copy=False, locate=locator.locate if locator else None)
    if not isinstance(frozen, FrozenMapping):
        raise UnsupportedStateError((), "snapshot root must be a mapping")
    tree, tensors = encode_tree(frozen)
    header: dict[str, Any] = {}
    table = []
    offset = 0
    copied: list[FrozenTensor] = []
    referenced_bytes = 0
    file_format = SNAPSHOT_FILE_FORMAT
    for name, tensor in tensors:
        entry = info_for_text(tensor.dtype)
        digest, _ = digest_buffer(tensor.data)
        reference = confirmed_reference(tensor, digest) if include_values else None
        table.append(
            {
                "name": name,
                "dtype": tensor.dtype,
                "shape": list(tensor.shape),
                "device": tensor.device,
                "requires_grad": tensor.requires_grad,
                "digest": digest.hex(),
                "nbytes": tensor.nbytes,
                **placement_entry(tensor),
                **reference_entry(reference),
            }
        )
        if reference is not None:
            referenced_bytes += tensor.nbytes
            if reference.pieces:
                file_format = SNAPSHOT_PIECES_FORMAT
            elif file_format == SNAPSHOT_FILE_FORMAT:
                file_format = SNAPSHOT_REFERENCES_FORMAT
        elif include_values:
            copied.append(tensor)
            code = entry.safetensors_code
            shape = list(tensor.shape) if code is not None else [tensor.nbytes]
            header[name] = {
                "dtype": code or "U8",
                "shape": shape,
                "data_offsets": [offset, offset + tensor.nbytes],
            }
            offset += tensor.nbytes
    manifest = {
        "format": file_format,
        "schema_version": SNAPSHOT_SCHEMA_VERSION,
        "backend": backend,
        "step": step,
        "digest_version": core.DIGEST_VERSION,
        "includes_values": include_values,
        "tensors": table,
        "tree": tree,
        "environment": dict(environment_fingerprint() if environment is None else environment),
    }
    manifest_text = json.dumps(manifest, sort_keys=True)
    header["__metadata__"] = {
        _METADATA_KEY: manifest_text,
        _MANIFEST_DIGEST_KEY: _text_digest(manifest_text, core.DIGEST_VERSION).hex(),
    }
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    header_bytes += b" " * (-(8 + len(header_bytes)) % 8)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    try:
        with open(temporary, "wb") as stream:
            stream.write(struct.pack("<Q", len(header_bytes)))
            stream.write(header_bytes)
            for tensor in copied:
                write_buffer(stream, tensor.data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:  # e.g. the path is a directory: leave no <path>.tmp behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return SnapshotFileInfo(
        path=target,
        file_bytes=8 + len(header_bytes) + (offset if include_values else 0),
        tensor_count=len(tensors),
        tensor_bytes=sum(tensor.nbytes for _, tensor in tensors),
        includes_values=include_values,
        referenced_bytes=referenced_bytes,
    )


# Reading ------------------------------------------------------------------------------


def read_snapshot(
    path: str | os.PathLike[str], *, trust_digests: bool = False
) -> tuple[Snapshot, dict[str, Any]]:
    """Map a snapshot file, verify it, and return (snapshot, manifest extras such as the environment).

    Tensor leaves are zero-copy views into the memory-mapped file and carry
    their recorded digest; a digest-only snapshot has `data=None` leaves.
    Every tensor's bytes are digested and checked against the manifest (one
    read of the file), and the manifest against its own recorded digest, so
    later comparisons may decide equality from digests alone.
    `trust_digests=True` skips the tensor-byte check, for a file whose
    provenance the caller vouches for (the manifest is still checked: it is
    a few kilobytes). Raises SnapshotFileError for a truncated, corrupt,
    damaged or foreign file.
    """
    source = Path(path)
    kind = special_file_kind(source)
    if kind is not None:
        raise SnapshotFileError(
            f"snapshot file {source} is {kind}, not a regular file; snapshots are memory-mapped "
            "files: record or copy it to a file"
        )
    with open(source, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if size < 8:
            raise _corrupt(source, f"file has {size} bytes, shorter than the 8-byte header length")
        mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    header_length = struct.unpack_from("<Q", mapped, 0)[0]
    if header_length > min(size - 8, _MAX_HEADER_BYTES):
        raise _corrupt(
            source, f"header length {header_length} exceeds the file ({size} bytes): truncated?"
        )
    try:
        header = json.loads(bytes(mapped[8 : 8 + header_length]))
        manifest_text = header["__metadata__"][_METADATA_KEY]
        manifest = json.loads(manifest_text)
    except (ValueError, KeyError, TypeError, RecursionError) as error:  # Recursion: [[[[...
        raise _corrupt(
            source, f"header is not a trainparity snapshot header ({error_text(error)})"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") not in _READABLE_FORMATS:
        raise _corrupt(
            source,
            f"manifest format is {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
            f"expected one of {', '.join(map(repr, _READABLE_FORMATS))}",
        )
    digest_version = manifest.get("digest_version")
    if isinstance(digest_version, bool) or digest_version not in core.DIGEST_VERSIONS:
        raise _corrupt(
            source,
            f"digest version {digest_version!r} is not one this build reads "
            f"({', '.join(map(str, core.DIGEST_VERSIONS))})",
        )
    manifest_verified = _manifest_verified(
        source, header["__metadata__"], manifest_text, digest_version
    )
    data_start = 8 + header_length
    data_view = memoryview(mapped)[data_start:]
    checkpoints = CheckpointMaps(source) if manifest["format"] != SNAPSHOT_FILE_FORMAT else None
    try:
        tensors = [
            _tensor_leaf(
                entry,
                header,
                data_view,
                manifest["includes_values"],
                checkpoints,
                pieces_allowed=manifest["format"] == SNAPSHOT_PIECES_FORMAT,
            )
            for entry in manifest["tensors"]
        ]
        state = decode_tree(manifest["tree"], tensors)
        snapshot = Snapshot(
            step=manifest["step"],
            state=state,
            backend=manifest["backend"],
            schema_version=manifest["schema_version"],
        )
    except SnapshotFileError as error:
        raise _corrupt(source, str(error)) from None
    except (
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        OverflowError,  # int(Infinity) from a JSON number
        RecursionError,  # a tree nested deeper than the decoder's stack
        struct.error,
    ) as error:
        raise _corrupt(source, f"manifest is malformed ({error_text(error)})") from None
    if not isinstance(state, FrozenMapping):
        raise _corrupt(source, "snapshot root is not a mapping")
    if not isinstance(manifest.get("environment"), (dict, type(None))):
        raise _corrupt(source, "manifest environment is not a mapping")
    if _nesting_depth(manifest.get("environment")) > _MAX_ENVIRONMENT_DEPTH:
        # A fingerprint is a few levels deep; reports render it recursively.
        raise _corrupt(
            source, f"manifest environment is nested more than {_MAX_ENVIRONMENT_DEPTH} levels deep"
        )
    _verify_tensor_bytes(
        source, mapped, data_start, header, manifest, tensors, checkpoints, trust_digests
    )
    extras = {
        "environment": manifest.get("environment"),
        "includes_values": bool(manifest["includes_values"]),
        "digest_version": digest_version,
        "manifest_verified": manifest_verified,
        "tensors_verified": not trust_digests and bool(manifest["includes_values"]),
        # Checkpoint files whose ranges stand for tensors; always verified.
        "referenced_files": checkpoints.paths() if checkpoints is not None else [],
    }
    return snapshot, extras


def _text_digest(text: str, version: int) -> bytes:
    return digest_buffer(text.encode("utf-8"), version=version)[0]


def _manifest_verified(
    source: Path, metadata: dict, manifest_text: str, digest_version: int
) -> bool:
    """Check the manifest against its recorded digest.

    Files of digest version 1 were written before the manifest had a digest:
    they read as unverified (False). From version 2 on the digest is required,
    so a damaged key cannot pass a file off as an old one.
    """
    recorded = metadata.get(_MANIFEST_DIGEST_KEY)
    if recorded is None and digest_version < 2:
        return False
    if recorded != _text_digest(manifest_text, digest_version).hex():
        raise _damaged(source, "its manifest does not match its recorded digest")
    return True


def _verify_tensor_bytes(
    source: Path,
    mapped: mmap.mmap,
    data_start: int,
    header: dict,
    manifest: dict,
    tensors: list[FrozenTensor],
    checkpoints: CheckpointMaps | None,
    trust_digests: bool,
) -> None:
    """Digest tensors' bytes where they lie and compare with the recorded digests.

    Bytes in the snapshot file are checked unless `trust_digests`; ranges of
    referenced checkpoint files always are. A file is read in blocks whose
    pages are released from this process after digesting (they stay in the
    page cache), so verifying a file of any size leaves the reader's resident
    memory flat, as comparing does.
    """
    version = manifest["digest_version"]
    for entry, tensor in zip(manifest["tensors"], tensors, strict=True):
        reference = entry.get("reference")
        if tensor.data is None:
            continue
        pieced = isinstance(reference, dict) and "pieces" in reference
        if pieced and checkpoints is not None:  # its copy, always verified
            file, position = checkpoints.assemblies[entry["name"]], 0
        elif reference is not None and checkpoints is not None:
            file, position = checkpoints.mapped(reference["path"]), int(reference["offset"])
        elif trust_digests:
            continue
        else:
            file, position = mapped, data_start + int(header[entry["name"]]["data_offsets"][0])
        chunk_digests = bytearray()
        for index, block in enumerate(iter_host_blocks(tensor.data, VERIFY_BLOCK_BYTES)):
            chunk_digests += core.digest_chunks(
                block,
                first_chunk=index * (VERIFY_BLOCK_BYTES // core.DIGEST_CHUNK_BYTES),
                threads=core_threads(len(block)),
                version=version,
            )
            if file is not None:
                release_pages(file, position, position + len(block))
            position += len(block)
        digest = core.digest_root(bytes(chunk_digests), len(tensor.data), version=version)
        if digest == tensor.digest:
            continue
        if reference is not None:
            names = (
                sorted({piece["path"] for piece in reference["pieces"]})
                if pieced
                else [reference["path"]]
            )
            raise SnapshotFileError(
                f"checkpoint {', '.join(names)} changed after it was observed: tensor "
                f"{entry['name']} no longer matches the digest that snapshot file {source} "
                "recorded; run the check again and leave its checkpoints unchanged until it ends"
            )
        raise _damaged(source, f"tensor {entry['name']} does not match its recorded digest")


def _damaged(path: Path, detail: str) -> SnapshotFileError:
    return SnapshotFileError(
        f"snapshot file {path} is damaged: {detail}; copy or record it again "
        "(its bytes changed after it was written)"
    )


def _nesting_depth(value: Any) -> int:
    """How many lists/dicts deep a JSON value goes (iteratively: the value is untrusted)."""
    deepest = 0
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth + 1)
            pending.extend(
                (child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _corrupt(path: Path, detail: str) -> SnapshotFileError:
    return SnapshotFileError(f"snapshot file {path} is unreadable: {detail}; record it again")


def _tensor_leaf(
    entry: dict,
    header: dict,
    data: memoryview,
    includes_values: bool,
    checkpoints: CheckpointMaps | None,
    *,
    pieces_allowed: bool,
) -> FrozenTensor:
    element = info_for_text(entry["dtype"])
    shape = tuple(int(size) for size in entry["shape"])
    nbytes = int(entry["nbytes"])
    expected = element.element_size
    for size in shape:
        if size < 0:
            raise SnapshotFileError(f"tensor {entry['name']!r} has a negative dimension")
        expected *= size
    if expected != nbytes:
        raise SnapshotFileError(
            f"tensor {entry['name']!r} records {nbytes} bytes but its shape needs {expected}"
        )
    payload = None
    if "reference" in entry:
        if checkpoints is None or not includes_values:
            raise SnapshotFileError(
                f"tensor {entry['name']!r} is a reference, which format {SNAPSHOT_FILE_FORMAT!r} "
                "and digest-only snapshots do not have"
            )
        reference = entry["reference"]
        if isinstance(reference, dict) and "pieces" in reference:
            if not pieces_allowed:
                raise SnapshotFileError(
                    f"tensor {entry['name']!r} is a reference of several pieces, which only "
                    f"format {SNAPSHOT_PIECES_FORMAT!r} has"
                )
            payload = checkpoints.assembled(reference, nbytes, entry["name"])
        else:
            payload = checkpoints.view(reference, nbytes, entry["name"])
    elif includes_values:
        stored = header[entry["name"]]
        begin, end = (int(offset) for offset in stored["data_offsets"])
        if not 0 <= begin <= end <= len(data) or end - begin != nbytes:
            raise SnapshotFileError(
                f"tensor {entry['name']!r} spans bytes [{begin}, {end}) but the data section has {len(data)} bytes: truncated?"
            )
        code = element.safetensors_code
        if stored.get("dtype") != (code or "U8") or stored.get("shape") != (
            list(shape) if code is not None else [nbytes]
        ):
            raise SnapshotFileError(
                f"tensor {entry['name']!r} has a safetensors dtype/shape that disagrees with the manifest"
            )
        payload = data[begin:end]
    digest = bytes.fromhex(entry["digest"])
    if len(digest) != 16:
        raise SnapshotFileError(f"tensor {entry['name']!r} has a malformed digest")
    return FrozenTensor(
        shape=shape,
        dtype=entry["dtype"],
        device=str(entry["device"]),
        requires_grad=bool(entry["requires_grad"]),
        data=payload,
        digest=digest,
        placement=placement_of_entry(entry),
    )
