"""Pure-Python digest versions 1 and 2, written from docs/design.md ("Digest") alone."""

from __future__ import annotations

import struct

CHUNK = 65536
STRIPE = 64
MASK64 = (1 << 64) - 1
ROOT_TAG = MASK64
VERSIONS = (1, 2)


def splitmix64(seed: int, count: int) -> list[int]:
    """The first `count` outputs of splitmix64 from `seed`."""
    state = seed
    words = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        words.append(z ^ (z >> 31))
    return words


# Seeds: the first 64 fraction bits of pi (version 1) and of e (version 2).
SECRET = {1: splitmix64(0x243F6A8885A308D3, 20), 2: splitmix64(0xB7E151628AED2A6A, 32)}


def mum(a: int, b: int) -> int:
    product = a * b
    return (product & MASK64) ^ (product >> 64)


def rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK64


def start(version: int) -> list[int]:
    """The initial lane accumulators."""
    return SECRET[1][16:20] if version == 1 else SECRET[2][8:16]


def absorb(version: int, acc: list[int], data: bytes) -> None:
    """Absorbs whole 64-byte stripes into the accumulators, in place."""
    words = struct.unpack(f"<{len(data) // 8}Q", data)
    k = SECRET[version]
    for stripe_start in range(0, len(words), 8):
        d = words[stripe_start : stripe_start + 8]
        if version == 1:
            for lane in range(4):
                first, second = d[2 * lane], d[2 * lane + 1]
                mixed = mum(first ^ k[2 * lane], second ^ k[2 * lane + 1] ^ acc[lane])
                acc[lane] = (mixed + (rotl(acc[lane], 23) ^ first ^ second)) & MASK64
        else:
            for lane in range(8):
                x = d[lane] ^ k[lane]
                product = (x & 0xFFFFFFFF) * (x >> 32)
                acc[lane] = (rotl(acc[lane], 27) + d[lane ^ 1] + product) & MASK64


def finish(version: int, acc: list[int], tag: int, length: int) -> bytes:
    k = SECRET[version]
    if version == 1:
        left = mum(acc[0] ^ tag ^ k[8], acc[1] ^ k[9])
        right = mum(acc[2] ^ length ^ k[10], acc[3] ^ k[11])
        return struct.pack(
            "<QQ", mum(left ^ k[12], right ^ k[13]), mum(left ^ k[14], right ^ k[15])
        )
    folded = [mum(acc[i] ^ k[16 + i], acc[i + 4] ^ k[20 + i]) for i in range(4)]
    left = mum(folded[0] ^ tag ^ k[24], folded[1] ^ k[25])
    right = mum(folded[2] ^ length ^ k[26], folded[3] ^ k[27])
    return struct.pack("<QQ", mum(left ^ k[28], right ^ k[29]), mum(left ^ k[30], right ^ k[31]))


def lane_hash(version: int, message: bytes, tag: int, length: int) -> bytes:
    """H(M, tag, length): the message zero-padded to whole stripes, absorbed, finished."""
    acc = start(version)
    absorb(version, acc, message + bytes(-len(message) % STRIPE))
    return finish(version, acc, tag, length)


def chunk_digests(version: int, data: bytes) -> list[bytes]:
    return [
        lane_hash(
            version,
            data[offset : offset + CHUNK],
            offset // CHUNK,
            len(data[offset : offset + CHUNK]),
        )
        for offset in range(0, len(data), CHUNK)
    ]


def reference_digest(data: bytes, version: int) -> bytes:
    return lane_hash(version, b"".join(chunk_digests(version, data)), ROOT_TAG, len(data))
