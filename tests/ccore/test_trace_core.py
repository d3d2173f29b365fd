"""Native core trace_job under the sanitizers: events, kills, timeouts, copies, bad arguments.

The jobs are /bin/sh one-liners (no Python child, nothing the sanitizer
preload would follow), so every byte the tracer reads and builds is checked
by AddressSanitizer and UBSan in CI.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SHELL = shutil.which("sh") or "/bin/sh"
PATH_ENV = f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}".encode()


def _trace(core, tmp_path: Path, script: str, **options):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    if not core.TRACE_SUPPORTED:
        pytest.skip("the tracer needs Linux on x86-64 or AArch64")
    return core.trace_job(
        [SHELL.encode(), b"-c", script.encode()],
        [PATH_ENV],
        str(root).encode(),
        str(tmp_path / "out").encode(),
        str(tmp_path / "err").encode(),
        os.path.realpath(root).encode(),
        **options,
    )


SAVE = "mkdir d && printf 0123456789 > d/a.tmp && mv d/a.tmp d/a && rm d/a && rmdir d"


def test_a_shell_save_is_traced_call_by_call(core, tmp_path):
    result = _trace(core, tmp_path, SAVE, observe_opens=True, timeout=30.0)
    assert result["returncode"] == 0 and result["signal"] is None
    assert not result["timed_out"] and not result["killed"] and result["copy_errno"] == 0
    ops = [(event[3], event[4], event[5]) for event in result["events"]]
    assert ("mkdir", "d", None) in ops and ("create", "d/a.tmp", None) in ops
    assert ("rename", "d/a.tmp", "d/a") in ops and ("unlink", "d/a", None) in ops
    assert ("rmdir", "d", None) in ops
    write = next(event for event in result["events"] if event[3] == "write")
    assert write[4] == "d/a.tmp" and write[6] == 0 and write[7] == 10
    seqs = [event[0] for event in result["events"] if event[0] >= 0]
    assert seqs == list(range(len(seqs)))


def test_a_kill_stops_before_the_numbered_call(core, tmp_path):
    first = _trace(core, tmp_path, SAVE, timeout=30.0)
    rename = next(event[0] for event in first["events"] if event[3] == "rename")
    shutil.rmtree(tmp_path / "root")
    killed = _trace(core, tmp_path, SAVE, kill_at=rename, timeout=30.0)
    # `mv` made the call and was killed; the shell saw it die (128 + 9) and stopped there.
    assert killed["killed"] and killed["returncode"] == 137
    assert killed["events"][-1][3] == "rename" and killed["events"][-1][8] is True
    assert (tmp_path / "root" / "d" / "a.tmp").read_bytes() == b"0123456789"


def test_a_fsync_copy_and_a_timeout(core, tmp_path):
    copies = tmp_path / "copies"
    copies.mkdir()
    # sh has no fsync: `sync FILE` (coreutils) fsyncs it.
    if shutil.which("sync") is None:
        pytest.skip("no sync program")
    result = _trace(
        core, tmp_path, "printf abc > f && sync f", copy_dir=str(copies).encode(), timeout=30.0
    )
    assert result["returncode"] == 0
    synced = [event for event in result["events"] if event[3] in ("fsync", "fdatasync")]
    assert synced and synced[0][9] is True
    assert (copies / str(synced[0][0])).read_bytes() == b"abc"
    slow = _trace(core, tmp_path, "sleep 30", timeout=0.5)
    assert slow["timed_out"] and slow["signal"] == 9


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"argv": []}, ValueError),
        ({"argv": ["sh"]}, TypeError),
        ({"argv": [b"sh\0x"]}, TypeError),
        ({"env": "PATH=/bin"}, TypeError),
        ({"timeout": 0.0}, ValueError),
        ({"copy_dir": 3}, TypeError),
    ],
)
def test_bad_arguments_raise_with_a_reason(core, tmp_path, change, error):
    arguments = {
        "argv": [SHELL.encode(), b"-c", b"true"],
        "env": [PATH_ENV],
        "cwd": str(tmp_path).encode(),
        "stdout_path": str(tmp_path / "out").encode(),
        "stderr_path": str(tmp_path / "err").encode(),
        "root": str(tmp_path).encode(),
    }
    options = {}
    for key, value in change.items():
        (arguments if key in arguments else options)[key] = value
    with pytest.raises(error):
        core.trace_job(
            arguments["argv"],
            arguments["env"],
            arguments["cwd"],
            arguments["stdout_path"],
            arguments["stderr_path"],
            arguments["root"],
            **options,
        )


def _warm_child_side():
    """processes/warm/child.py loaded from its file, as the warm server loads it: the standard
    library only, nothing of trainparity (whose core here is the sanitized one)."""
    import importlib.util

    path = (
        Path(__file__).resolve().parents[2] / "python/trainparity/_internal/processes/warm/child.py"
    )
    spec = importlib.util.spec_from_file_location("_warm_child_side", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seizable_shell(core, root: Path, script: str) -> int:
    """A child that waits to be traced and installs trace_filter()'s program (child.py's
    await_tracer, what a warm server's fork does for the crash check), then execs sh."""
    child_side = _warm_child_side()
    program = core.trace_filter()
    assert len(program) % 8 == 0 and len(program) > 8
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setpgid(0, 0)
            os.chdir(root)
            child_side.await_tracer(program)
            os.execve(SHELL, [SHELL, "-c", script], {"PATH": PATH_ENV.decode()[5:]})
        finally:
            os._exit(127)
    return pid


def test_a_seized_process_is_traced_and_killed_as_a_forked_one(core, tmp_path):
    if not core.TRACE_SUPPORTED:
        pytest.skip("the tracer needs Linux on x86-64 or AArch64")
    forked = _trace(core, tmp_path, SAVE, timeout=30.0)
    rename = next(event[0] for event in forked["events"] if event[3] == "rename")
    for kill_at, place in ((-1, "seized"), (rename, "seized_killed")):
        root = tmp_path / place
        root.mkdir()
        pid = _seizable_shell(core, root, SAVE)
        seized = core.trace_pid(pid, os.path.realpath(root).encode(), kill_at=kill_at, timeout=30.0)
        calls = [event[3:8] for event in seized["events"]]
        if kill_at < 0:
            assert seized["returncode"] == 0 and not seized["killed"]
            assert calls == [event[3:8] for event in forked["events"]]
        else:
            assert seized["killed"] and seized["returncode"] == 137
            assert seized["events"][-1][3] == "rename" and seized["events"][-1][8] is True
            assert (root / "d" / "a.tmp").read_bytes() == b"0123456789"
    with pytest.raises(ValueError):
        core.trace_pid(0, str(tmp_path).encode())
    with pytest.raises(ValueError):
        core.trace_pid(os.getpid(), str(tmp_path).encode(), timeout=0.0)
