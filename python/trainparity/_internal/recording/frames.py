"""The recording file: one append-only stream of self-delimiting, self-verifying frames per rank.

Layout (docs/design.md, "Recordings"): every frame is

    24 bytes  header: b"TPRF", kind (1 byte: H head, L layout, S step), digest
              version (1 byte), frame version (1 byte), 1 zero byte, meta
              length (u32), header checksum (u32), data length (u64),
              little-endian
    meta      `meta length` bytes, zero-padded to a multiple of 8
    data      `data length` bytes (tensor values of a full step), zero-padded to 8
    16 bytes  trailer: digest of header + padded meta

so every frame starts 8-byte aligned and the chain of headers is the file's
index. The header checksum lets a header be trusted before the lengths in it
are followed; frame version 0 marks the recordings written before headers
had one (those bytes are zero there). The trailer is written last: a frame
is complete when the file holds all of it. A process killed mid-write leaves
a short last frame, which readers report as the partial tail; any other
frame that does not verify is damage. Tensor values are covered by their own
digests in the step's meta, exactly as in a snapshot file.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

from trainparity._internal.native.core import core
from trainparity._internal.native.cuda import digest_buffer
from trainparity._internal.state.tree_codec import SnapshotFileError

MAGIC = b"TPRF"
HEAD, LAYOUT, STEP = b"H", b"L", b"S"
HEADER = struct.Struct("<4scBBxIIQ")
FRAME_VERSION = 1
UNCHECKED_FRAME_VERSION = 0  # written before frame headers carried a checksum
_CHECKSUM = slice(12, 16)
TRAILER_BYTES = 16
# Step meta: claimed step, layout index, 1 when values are stored, scalars JSON length.
STEP_META = struct.Struct("<qIBxxxI4x")
# Per tensor and step: digest, element count, sum, L2 norm, max |x|, NaN count, Inf count.
TENSOR_RECORD = struct.Struct("<16sQdddQQ")


class RecordingError(SnapshotFileError):
    """A recording that cannot be written or read: misuse, truncation inside the file, damage."""


def padded(length: int) -> int:
    return length + (-length % 8)


def header_checksum(header: bytes) -> int:
    """CRC-32 of the header's other 20 bytes.

    CRC-32 rather than the core's 128-bit digest cut to 32 bits: over these
    20 bytes and its own 4 it detects every error of up to 6 bits and every
    burst of up to 32 bits with certainty (tests/test_recording_damage.py), a
    cut digest only with probability 1 - 2**-32.
    """
    return zlib.crc32(header[: _CHECKSUM.start] + header[_CHECKSUM.stop :])


def frame_header(kind: bytes, meta_length: int, data_length: int) -> bytes:
    fields = (MAGIC, kind, core.DIGEST_VERSION, FRAME_VERSION, meta_length)
    unchecked = HEADER.pack(*fields, 0, data_length)
    return HEADER.pack(*fields, header_checksum(unchecked), data_length)


def frame_trailer(header: bytes, padded_meta: bytes, digest_version: int) -> bytes:
    return digest_buffer(header + padded_meta, version=digest_version)[0]


@dataclass(frozen=True)
class Frame:
    """One complete frame of a mapped recording file."""

    kind: bytes
    digest_version: int
    meta: memoryview
    data: memoryview
    offset: int


@dataclass(frozen=True)
class PartialTail:
    """The last frame, cut short by the end of the file: what a writer killed mid-write leaves.

    `kind` is None when the file ends inside the header; `step` is the step a
    cut-short step frame claims (as written, unverified) when the file holds
    that field.
    """

    offset: int
    kind: bytes | None
    step: int | None


@dataclass(frozen=True)
class FrameScan:
    """A recording file's complete frames, its frame version (None: no whole header) and partial tail."""

    frames: list[Frame]
    frame_version: int | None
    partial_tail: PartialTail | None


def scan_frames(path: Any, mapped: Any) -> FrameScan:
    """Every complete frame in order, each header and trailer verified, and the partial tail if any.

    Only the last frame may be cut short, and only with a header that
    verifies (or the beginning of one): anything else is damage,
    RecordingError naming the frame's byte offset and what did not verify.
    """
    view = memoryview(mapped)
    size = len(view)
    frames: list[Frame] = []
    version: int | None = None
    offset = 0
    while offset < size:
        header = bytes(view[offset : offset + HEADER.size])
        problem = header_problem(header, version)
        if problem is not None:
            raise damaged(path, f"the frame at byte {offset} {problem}")
        if len(header) < HEADER.size:
            return FrameScan(frames, version, PartialTail(offset, None, None))
        _, kind, digest_version, version, meta_length, _, data_length = HEADER.unpack(header)
        meta_end = offset + HEADER.size + padded(meta_length)
        end = meta_end + padded(data_length) + TRAILER_BYTES
        if end > size:
            if version == UNCHECKED_FRAME_VERSION:
                _no_complete_frame_after(path, mapped, offset, end)
            return FrameScan(frames, version, PartialTail(offset, kind, _step_of(view, offset)))
        if not _trailer_matches(view, offset, meta_end, end, digest_version):
            raise damaged(path, f"the frame at byte {offset} does not match its recorded digest")
        frames.append(
            Frame(
                kind=kind,
                digest_version=digest_version,
                meta=view[offset + HEADER.size : offset + HEADER.size + meta_length],
                data=view[meta_end : meta_end + data_length],
                offset=offset,
            )
        )
        offset = end
    return FrameScan(frames, version, None)


def header_problem(header: bytes, file_version: int | None) -> str | None:
    """What does not verify in a frame header (or in the beginning of one, cut by the end of the file).

    `file_version` is the frame version of the file's first frame (None for
    the first frame): every frame of a file has the same one, so a flipped
    version bit cannot pass a checked header off as an unchecked one.
    """
    whole = len(header) == HEADER.size
    version = header[6] if len(header) > 6 else None
    if whole and version == FRAME_VERSION:
        recorded = int.from_bytes(header[_CHECKSUM], "little")
        if recorded != header_checksum(header):
            return (
                "has a header that does not match its checksum (a kind, version or length changed)"
            )
    if header[:4] != MAGIC[: len(header)]:
        return "is not a frame header (no b'TPRF')"
    if len(header) > 4 and header[4:5] not in (HEAD, LAYOUT, STEP):
        return f"has an unknown kind {header[4:5]!r}"
    if len(header) > 5 and header[5] not in core.DIGEST_VERSIONS:
        readable = ", ".join(map(str, core.DIGEST_VERSIONS))
        return f"has digest version {header[5]}, not one this build reads ({readable})"
    if version is not None and version not in (UNCHECKED_FRAME_VERSION, FRAME_VERSION):
        return f"has an unknown frame version {version}"
    if version is not None and file_version is not None and version != file_version:
        return f"has frame version {version} in a file of frame version {file_version}"
    if len(header) > 7 and header[7] != 0:
        return "has a non-zero reserved byte"
    if version == UNCHECKED_FRAME_VERSION and any(header[_CHECKSUM]):
        return "has frame version 0 (no header checksum) but non-zero checksum bytes"
    return None


def _trailer_matches(view: memoryview, offset: int, meta_end: int, end: int, version: int) -> bool:
    recorded = bytes(view[end - TRAILER_BYTES : end])
    return digest_buffer(view[offset:meta_end], version=version)[0] == recorded


def _step_of(view: memoryview, offset: int) -> int | None:
    """The step a cut-short step frame claims, if the file holds that field."""
    start = offset + HEADER.size
    if view[offset + 4 : offset + 5] != STEP or len(view) < start + 8:
        return None
    return int.from_bytes(view[start : start + 8], "little", signed=True)


def _no_complete_frame_after(path: Any, mapped: Any, offset: int, claimed_end: int) -> None:
    """Raise when a complete frame follows one that claims to run past the end of the file.

    For frame version 0, whose headers carry no checksum: a killed writer
    leaves nothing after its last frame, so a later frame whose trailer
    verifies means the earlier frame's length field is damaged.
    """
    view = memoryview(mapped)
    position = mapped.find(MAGIC, offset + HEADER.size)
    while position != -1:
        if position % 8 == 0 and len(view) - position >= HEADER.size:
            _, _, digest_version, _, meta_length, _, data_length = HEADER.unpack_from(
                view, position
            )
            meta_end = position + HEADER.size + padded(meta_length)
            end = meta_end + padded(data_length) + TRAILER_BYTES
            if (
                digest_version in core.DIGEST_VERSIONS
                and end <= len(view)
                and _trailer_matches(view, position, meta_end, end, digest_version)
            ):
                raise damaged(
                    path,
                    f"the frame at byte {offset} claims to end at byte {claimed_end}, past the "
                    f"end of the file, but a complete frame follows at byte {position} (its "
                    "length field changed)",
                )
        position = mapped.find(MAGIC, position + 1)


def damaged(path: Any, detail: str) -> RecordingError:
    return RecordingError(
        f"recording {path} is damaged: {detail}; record it again "
        "(its bytes changed after they were written)"
    )
