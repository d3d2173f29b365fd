"""Headless Chromium for report tests: render a page, dump its DOM, read a screenshot's pixels."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib

from tests.system_packages import require_packages


def chromium_binary() -> str:
    """The headless Chromium on PATH; skips the test where there is none (fails under CI)."""
    require_packages("chromium")
    names = ("chromium", "chromium-browser", "google-chrome")
    return next(found for name in names if (found := shutil.which(name)))


def render_page(chromium: str, page, profile, *options: str) -> subprocess.CompletedProcess:
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *options,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def png_pixels(data: bytes) -> list[tuple[int, int, int]]:
    """RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, compressed = 8, b""
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            compressed += body
        position += 12 + length
    channels = 4 if colour == 6 else 3
    raw, stride = zlib.decompress(compressed), width * channels
    previous, pixels = bytearray(stride), []
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                nearest = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + nearest) & 0xFF
        pixels.extend(tuple(line[i : i + 3]) for i in range(0, stride, channels))
        previous = line
    return pixels


def pixels_near(data: bytes, colour: str, tolerance: int = 8) -> int:
    """How many pixels of a PNG screenshot are within `tolerance` of `colour` ('#rrggbb')."""
    wanted = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        1
        for pixel in png_pixels(data)
        if all(abs(a - b) <= tolerance for a, b in zip(pixel, wanted, strict=True))
    )
