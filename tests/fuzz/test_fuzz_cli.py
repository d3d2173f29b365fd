"""Fuzz `trainparity` argument parsing and validation: random argv for every command.

Every argv must end with an exit code 0-4 (docs/cli.md) and terminal-safe
output, never a traceback. Case and --call strings always name a module that
does not exist, so no check or training child ever really runs: parsing and
validation are the target.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import numpy
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.budget import fuzz_settings, within_seconds
from tests.fuzz.checks import run_cli

ABSENT = "trainparity_fuzz_absent"  # never importable: cases and callables are looked up in vain
HOSTILE = "evil\nPASS: forged\x1b[2J\x9b31m"
NOISE = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["-", "--", "--bogus", "-x", "--json=1", "--rtol=", "=", "\x00", HOSTILE]),
)
NUMBERS = st.one_of(
    st.sampled_from(["0", "1", "-1", "1e-6", "nan", "inf", "-inf", "1e400", "", "2**32", "0x10"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(repr),
    NOISE,
)
# Files in the working directory of each argv (see _workspace); outputs go to fresh names.
INPUTS = st.sampled_from(
    [
        "a.safetensors",
        "b.safetensors",
        "ids.npy",
        "ids.bin",
        "universe.txt",
        "checkpoint.pt",
        "dir",
        "fifo",
        "missing",
        "",
        "/dev/null",
        "/nonexistent/x",
        HOSTILE,
    ]
)
OUTPUTS = st.sampled_from(
    ["out/report.json", "out.html", "report.HTM", "dir", "fifo", "out/x/y", HOSTILE, ""]
)
CASES = st.one_of(
    st.sampled_from(["", ":", "nocolon", f"{ABSENT}:Case", f"{ABSENT}.sub:Case", f"{ABSENT}:"]),
    NOISE.map(lambda text: f"{ABSENT}_{text}"),
)


def _option(
    name: str, values: st.SearchStrategy[str] | None = None, *good: str
) -> st.SearchStrategy:
    """`[name]` or `[name, value]`, sometimes with the value missing or glued on with `=`.

    `good` values are drawn about half the time, so that argv gets past parsing
    into each command's own validation often enough.
    """
    if values is None:
        return st.just([name])
    if good:
        values = st.one_of(st.sampled_from(good), values)
    return st.one_of(
        values.map(lambda value: [name, value]),
        values.map(lambda value: [name, value]),
        values.map(lambda value: [f"{name}={value}"]),
        st.just([name]),  # the value left out
    )


OUTPUT = [_option("--json"), _option("--report", OUTPUTS)]
TOLERANCE = [
    _option("--rtol", NUMBERS, "1e-3"),
    _option("--atol", NUMBERS, "0"),
    _option("--equal-nan"),
]
EXECUTION = [
    _option("--cwd", INPUTS),
    _option("--timeout", NUMBERS),
    _option("--env", st.one_of(st.just("A=1"), st.just("=x"), st.just("NOEQUALS"), NOISE)),
    _option("--work-dir", OUTPUTS),
    _option("--sequential"),
    _option("--no-progress"),
]
_POLICIES = ["exactly_once", "at_least_once", "no_cross_rank_overlap", "expected_padding", "x"]
_RANK_FILES = st.tuples(st.sampled_from(["0", "1", "-1", "x", "", "00"]), INPUTS).map("=".join)
# command: (positionals, options given unless dropped, options drawn at random)
COMMANDS = {
    "diff": ([INPUTS, INPUTS], [], [*TOLERANCE, *OUTPUT]),
    "coverage": (
        [],
        [
            _option("--ids", st.one_of(_RANK_FILES, NOISE), "0=ids.npy", "1=ids.bin"),
            _option("--policy", st.sampled_from(_POLICIES), *_POLICIES[:4]),
        ],
        [
            _option("--ids", INPUTS.map(lambda path: f"2={path}"), "2=ids.npy"),
            _option("--universe", NUMBERS, "6", "0"),
            _option("--universe-file", INPUTS, "universe.txt"),
            _option("--padding-count", NUMBERS, "1"),
            _option("--epoch", NUMBERS, "1"),
            _option("--max-examples", NUMBERS, "2"),
            _option("--evidence", OUTPUTS, "evidence.json"),
            *OUTPUT,
        ],
    ),
    "snapshot": (
        [],
        [
            _option("--checkpoint", INPUTS, "checkpoint.pt"),
            _option("-o", OUTPUTS, "new.safetensors"),
        ],
        [
            _option(
                "--call",
                st.one_of(st.sampled_from([":", "x", f"{ABSENT}:f", f"{ABSENT}:"]), CASES),
            ),
            _option("-o", OUTPUTS),
            _option("--output", OUTPUTS),
            _option("--step", NUMBERS),
            _option("--digest-only"),
            _option("--cwd", INPUTS),
            *OUTPUT,
        ],
    ),
    "env": ([], [], OUTPUT),
    "resume": ([CASES], [], [*TOLERANCE, *EXECUTION, *OUTPUT]),
    "accumulation": (
        [CASES],
        [_option("--microbatches", NUMBERS, "2")],
        [
            _option("--clip-grad-norm", NUMBERS),
            _option("--clip-per-microbatch"),
            _option("--omit-final-microbatch"),
            _option("--no-scale-accumulated-loss"),
            _option("--device", st.sampled_from(["cpu", "cuda", "meta", "", HOSTILE])),
            _option("--seed", NUMBERS),
            *TOLERANCE,
            *EXECUTION,
            *OUTPUT,
        ],
    ),
}


@st.composite
def argvs(draw) -> list[str]:
    command = draw(st.sampled_from([*COMMANDS] * 4 + ["", "bogus", "--help", "-h", HOSTILE]))
    if command not in COMMANDS:
        return [command, *draw(st.lists(NOISE, max_size=2))]
    positionals, required, options = COMMANDS[command]
    argv = [command]
    for positional in positionals:
        if draw(st.integers(0, 9)):  # now and then left out
            argv.append(draw(positional))
    for option in required:
        if draw(st.integers(0, 9)):
            argv.extend(draw(option))
    for option in draw(st.lists(st.sampled_from(options), max_size=5)):
        argv.extend(draw(option))
    if draw(st.integers(0, 4)) == 0:  # unknown options and stray words anywhere
        argv.insert(draw(st.integers(1, len(argv))), draw(NOISE))
    return argv


@contextlib.contextmanager
def _workspace(template: Path, directory: Path):
    """A fresh copy of the input files as the working directory; sys.path as it was after."""
    shutil.copytree(template, directory, symlinks=True)
    os.mkfifo(directory / "fifo")
    previous, path = Path.cwd(), list(sys.path)
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)
        sys.path[:] = path
        shutil.rmtree(directory)


def _template(root: Path, snapshot_seeds, id_seeds) -> Path:
    template = root / "template"
    if template.exists():
        return template
    template.mkdir()
    shutil.copy(snapshot_seeds.files["tiny"], template / "a.safetensors")
    shutil.copy(snapshot_seeds.files["digest"], template / "b.safetensors")
    shutil.copy(id_seeds.files["range.npy"], template / "ids.npy")
    shutil.copy(id_seeds.files["extremes.bin"], template / "ids.bin")
    (template / "universe.txt").write_text("0\n1\n\n2\nx\n")
    torch.save({"w": torch.ones(2), "step": numpy.int64(3).item()}, template / "checkpoint.pt")
    (template / "dir").mkdir()
    return template


_RUNS = iter(range(1 << 62))


@fuzz_settings(ci_examples=400)
@given(argv=argvs())
def test_random_argv(snapshot_seeds, id_seeds, argv):
    template = _template(snapshot_seeds.directory.parent, snapshot_seeds, id_seeds)
    with within_seconds(), _workspace(template, template.parent / f"cli-{next(_RUNS)}"):
        run_cli(argv)


def test_the_vocabulary_reaches_every_outcome(snapshot_seeds, id_seeds):
    """The inputs above are real: the commands pass, fail, abstain, err and refuse with them."""
    template = _template(snapshot_seeds.directory.parent, snapshot_seeds, id_seeds)
    codes = set()
    with _workspace(template, template.parent / "cli-vocabulary"):
        for argv in (
            ["diff", "a.safetensors", "a.safetensors"],
            ["coverage", "--ids", "0=ids.npy", "--policy", "exactly_once", "--universe", "7"],
            ["coverage", "--ids", "0=ids.npy", "--policy", "exactly_once"],
            ["diff", "a.safetensors", "missing"],
            ["diff", "a.safetensors"],
            ["snapshot", "--checkpoint", "checkpoint.pt", "-o", "out.safetensors"],
        ):
            codes.add(run_cli(argv)[0])
    assert codes == {0, 1, 2, 3, 4}
