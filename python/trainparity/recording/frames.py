"""The recording file: one append-only stream of self-delimiting, digest-checked frames per rank.

Layout (docs/design.md, "Recordings"): every frame is

    24 bytes  header: b"TPRF", kind (1 byte: H head, L layout, S step), digest
              version (1 byte), 2 zero bytes, meta length (u32), 4 zero bytes,
              data length (u64), little-endian
    meta      `meta length` bytes, zero-padded to a multiple of 8
    data      `data length` bytes (tensor values of a full step), zero-padded to 8
    16 bytes  trailer: digest of header + padded meta

so every frame starts 8-byte aligned and the chain of headers is the file's
index. The trailer is written last: a frame is complete when the file holds
all of it, and a process killed mid-write leaves a short last frame, which
readers detect and ignore. Tensor values are covered by their own digests in
the step's meta, exactly as in a snapshot file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from trainparity.native.core import core
from trainparity.native.cuda import digest_buffer
from trainparity.state.snapshot_file import SnapshotFileError

MAGIC = b"TPRF"
HEAD, LAYOUT, STEP = b"H", b"L", b"S"
HEADER = struct.Struct("<4scBxxIxxxxQ")
TRAILER_BYTES = 16
# Step meta: claimed step, layout index, 1 when values are stored, scalars JSON length.
STEP_META = struct.Struct("<qIBxxxI4x")
# Per tensor and step: digest, element count, sum, L2 norm, max |x|, NaN count, Inf count.
TENSOR_RECORD = struct.Struct("<16sQdddQQ")


class RecordingError(SnapshotFileError):
    """A recording that cannot be written or read: misuse, truncation inside the file, damage."""


def padded(length: int) -> int:
    return length + (-length % 8)


def frame_header(kind: bytes, meta_length: int, data_length: int) -> bytes:
    return HEADER.pack(MAGIC, kind, core.DIGEST_VERSION, meta_length, data_length)


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


def scan_frames(path, mapped) -> tuple[list[Frame], bool]:
    """Every complete frame in order, each checked against its trailer; True when a partial tail was ignored.

    A frame cut short by the end of the file is the partial write of a killed
    process: ignored. A complete frame whose trailer does not match, or a
    header that is not a frame header, is damage: RecordingError.
    """
    view = memoryview(mapped)
    size = len(view)
    frames: list[Frame] = []
    offset = 0
    while offset < size:
        if size - offset < HEADER.size:
            return frames, True
        magic, kind, digest_version, meta_length, data_length = HEADER.unpack_from(view, offset)
        if magic != MAGIC or kind not in (HEAD, LAYOUT, STEP):
            raise damaged(path, f"no frame header at byte {offset}")
        if digest_version not in core.DIGEST_VERSIONS:
            raise damaged(
                path,
                f"frame at byte {offset} has digest version {digest_version}, not one this build "
                f"reads ({', '.join(map(str, core.DIGEST_VERSIONS))})",
            )
        meta_end = offset + HEADER.size + padded(meta_length)
        data_end = meta_end + padded(data_length)
        end = data_end + TRAILER_BYTES
        if end > size:
            return frames, True
        header_and_meta = view[offset:meta_end]
        recorded = bytes(view[data_end:end])
        if digest_buffer(header_and_meta, version=digest_version)[0] != recorded:
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
    return frames, False


def damaged(path, detail: str) -> RecordingError:
    return RecordingError(
        f"recording {path} is damaged: {detail}; record it again "
        "(its bytes changed after they were written)"
    )
