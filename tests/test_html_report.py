"""HTML reports: self-contained pages, and a FAIL report rendered by headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib

import pytest
from trainparity import Outcome
from trainparity.api import Difference, ProcessResumeResult
from trainparity.environment import environment_fingerprint
from trainparity.processes.evidence import ExternalProcessEvidence
from trainparity.reports.display import OUTCOME_COLOURS
from trainparity.reports.html import render_html_report, write_html_report

FIRST_PATH = 'optimizer.state["0"].exp_avg'


def _failed_resume() -> ProcessResumeResult:
    first = Difference(
        FIRST_PATH,
        "tensor_value",
        "tensor(shape=(3,), dtype=torch.float32, device=cpu, values=[0.1, 0.2, 0.3])",
        "tensor(shape=(3,), dtype=torch.float32, device=cpu, values=[0.1, 0.2, 0.4])",
        0.1,
        0.33,
    )
    return ProcessResumeResult(
        outcome=Outcome.FAIL,
        message=f"first observed divergence at step 4: {FIRST_PATH}",
        case="cases:Faulty",
        first_divergent_step=4,
        primary_difference=first,
        all_differences=(first,),
        processes=(ExternalProcessEvidence("baseline_a", 11, 1.5, 0),),
        timing_seconds={"total_wall": 6.0},
        environment=environment_fingerprint(),
    )


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("headless Chromium is not installed here (CI installs Debian's chromium)")


def _render(chromium: str, page, profile, *options: str) -> subprocess.CompletedProcess:
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


def _png_pixels(data: bytes) -> list[tuple[int, int, int]]:
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


def test_the_page_is_self_contained_and_escapes_every_value():
    page = render_html_report(_failed_resume())
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script|<link|<img|src=|https?://", page, flags=re.IGNORECASE)
    assert "optimizer.state[&quot;0&quot;].exp_avg" in page
    assert "Full report (JSON)" in page and "&quot;environment&quot;" in page


def test_a_file_name_that_is_not_utf8_is_written_escaped(tmp_path):
    # os.fsdecode(b"\xff.safetensors"): what argv and os.listdir give for such a name
    report = {"schema_version": 2, "outcome": "PASS", "message": "ok", "baseline": "\udcff.st"}
    size = write_html_report(tmp_path / "page.html", report)
    data = (tmp_path / "page.html").read_bytes()
    assert len(data) == size
    assert "<td>\\udcff.st</td>" in data.decode("utf-8")


def test_report_dicts_and_the_environment_report_render_too():
    report = {"schema_version": 2, "environment": environment_fingerprint()}
    page = render_html_report(report)
    assert "<h3>Environment</h3>" in page and "torch.version" in page
    with pytest.raises(TypeError, match="to_dict"):
        render_html_report(object())


def test_chromium_shows_the_outcome_and_first_divergence_of_a_fail_report(tmp_path):
    chromium = _chromium()
    page = tmp_path / "report.html"
    write_html_report(page, _failed_resume())

    dom = _render(chromium, page, tmp_path / "profile", "--dump-dom").stdout
    badge = re.search(r"<span class=\"tp-badge\" id=\"tp-outcome\"[^>]*>([^<]*)</span>", dom)
    assert badge is not None and badge.group(1) == "FAIL"
    divergence = dom.split("<h3>First divergence</h3>", 1)[1]
    assert 'optimizer.state["0"].exp_avg' in divergence.split("</table>", 1)[0]

    screenshot = tmp_path / "report.png"
    _render(
        chromium,
        page,
        tmp_path / "profile",
        "--window-size=800,240",
        f"--screenshot={screenshot}",
    )
    red = tuple(int(OUTCOME_COLOURS["FAIL"][i : i + 2], 16) for i in (1, 3, 5))
    badge_pixels = sum(
        1
        for pixel in _png_pixels(screenshot.read_bytes())
        if all(abs(a - b) <= 8 for a, b in zip(pixel, red, strict=True))
    )
    assert badge_pixels > 300, "the red FAIL badge should be visible above the fold"
