"""The crash check's tracer (src/_trainparity/trace.c through processes/traced_job.py).

Each test runs a small real program (no torch: the tracer must see what any
process does) under ptrace + seccomp and checks the mutations it reports
under the root, in order, with paths, offsets and lengths, and what a kill
just before one leaves on disk.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from trainparity._internal.crashes.power_loss import (
    DATA_LOSS,
    NAME_LOSS,
    PowerLossModel,
    apply_power_loss,
)
from trainparity._internal.processes.traced_job import TracedRun, run_traced, tracing_available

pytestmark = pytest.mark.skipif(not tracing_available(), reason="needs Linux x86-64/AArch64")


def _run(tmp_path: Path, body: str, **options: object) -> TracedRun:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    root = tmp_path / "run"
    root.mkdir(exist_ok=True)
    return run_traced(
        [sys.executable, str(script), str(root)],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"},
        cwd=tmp_path,
        stdout_path=tmp_path / "out.log",
        stderr_path=tmp_path / "err.log",
        root=root,
        timeout=options.pop("timeout", 60.0),  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


SAVE = """
import os, sys
root = sys.argv[1]
open(os.path.join(root, "..", "outside.txt"), "w").write("not traced")
os.mkdir(os.path.join(root, "ck"))
fd = os.open(os.path.join(root, "ck", "a.tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"0123456789")
os.pwrite(fd, b"AB", 3)
os.fsync(fd)
os.close(fd)
os.replace(os.path.join(root, "ck", "a.tmp"), os.path.join(root, "ck", "a"))
d = os.open(os.path.join(root, "ck"), os.O_RDONLY | os.O_DIRECTORY)
os.fsync(d)
os.close(d)
print(open(os.path.join(root, "ck", "a"), "rb").read())
"""


def test_each_mutation_under_the_root_is_reported_in_order(tmp_path: Path) -> None:
    run = _run(tmp_path, SAVE)
    assert run.returncode == 0, (tmp_path / "err.log").read_text()
    described = [event.describe() for event in run.mutations]
    assert described == [
        "mkdir ck",
        "create ck/a.tmp",
        "write ck/a.tmp @0+10",
        "pwrite ck/a.tmp @3+2",
        "fsync ck/a.tmp",
        "close ck/a.tmp",
        "rename ck/a.tmp -> ck/a",
        "fsync ck",
    ]
    assert [event.seq for event in run.mutations] == list(range(8))
    assert not any("outside" in event.path for event in run.events)
    assert (tmp_path / "out.log").read_text().strip() == "b'012AB56789'"


def test_a_kill_stops_the_job_just_before_that_call(tmp_path: Path) -> None:
    run = _run(tmp_path, SAVE, kill_at=3)  # before the pwrite
    assert run.killed and run.signal == 9 and run.returncode is None
    assert run.mutations[-1].describe() == "pwrite ck/a.tmp @3+2" and run.mutations[-1].killed
    assert (tmp_path / "run" / "ck" / "a.tmp").read_bytes() == b"0123456789"
    assert not (tmp_path / "run" / "ck" / "a").exists()


def test_threads_and_child_processes_are_traced_and_killed(tmp_path: Path) -> None:
    body = """
    import os, subprocess, sys, threading
    root = sys.argv[1]
    def write(name):
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"x" * 7)
    thread = threading.Thread(target=write, args=("from_thread",))
    thread.start(); thread.join()
    subprocess.run([sys.executable, "-c",
        "import sys; open(sys.argv[1] + '/from_child', 'wb').write(b'yy')", root], check=True)
    write("last")
    """
    run = _run(tmp_path, body)
    assert run.returncode == 0, (tmp_path / "err.log").read_text()
    paths = [event.path for event in run.mutations if event.op == "write"]
    assert paths == ["from_thread", "from_child", "last"]
    pids = {event.path: event.pid for event in run.mutations if event.op == "write"}
    assert len(set(pids.values())) == 3  # a thread, a child, the main thread
    again = tmp_path / "again"
    again.mkdir()
    point = next(event.seq for event in run.mutations if event.path == "from_child")
    killed = _run(again, body, kill_at=point)
    # The child dies before its write; its parent sees it die, as a job sees a rank die.
    assert killed.killed and killed.returncode == 1
    assert not (again / "run" / "from_child").exists() and not (again / "run" / "last").exists()


def test_a_job_past_its_timeout_dies_with_its_children(tmp_path: Path) -> None:
    body = """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open(sys.argv[1] + "/pid", "w").write(str(child.pid))
    time.sleep(120)
    """
    began = time.monotonic()
    run = _run(tmp_path, body, timeout=3.0)
    assert run.timed_out and run.signal == 9
    assert time.monotonic() - began < 60
    child = int((tmp_path / "run" / "pid").read_text())
    assert _gone_or_zombie(child)


def _gone_or_zombie(pid: int) -> bool:
    """No process `pid` runs (a zombie whose reaper has not come yet has ended)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


def test_reads_are_reported_apart_and_fsync_copies_hold_the_synced_bytes(tmp_path: Path) -> None:
    body = """
    import os, sys
    root = sys.argv[1]
    with open(os.path.join(root, "given"), "rb") as f:
        f.read()
    fd = os.open(os.path.join(root, "f"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"synced")
    os.fsync(fd)
    os.write(fd, b"+later")
    os.close(fd)
    """
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "given").write_bytes(b"input")
    copies = tmp_path / "copies"
    copies.mkdir()
    run = _run(tmp_path, body, observe_opens=True, copy_dir=copies)
    assert run.returncode == 0, (tmp_path / "err.log").read_text()
    assert [(event.op, event.path, event.seq) for event in run.reads] == [("open", "given", -1)]
    fsync = next(event for event in run.mutations if event.op == "fsync")
    assert fsync.copied and (copies / str(fsync.seq)).read_bytes() == b"synced"


def test_paths_relative_to_a_directory_descriptor_and_the_cwd_are_resolved(tmp_path: Path) -> None:
    body = """
    import os, sys
    root = sys.argv[1]
    os.makedirs(os.path.join(root, "a", "b"))
    d = os.open(os.path.join(root, "a"), os.O_RDONLY | os.O_DIRECTORY)
    os.close(os.open("b/../c", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=d))
    os.chdir(os.path.join(root, "a", "b"))
    os.unlink("../c")
    """
    run = _run(tmp_path, body)
    assert run.returncode == 0, (tmp_path / "err.log").read_text()
    ops = [(event.op, event.path) for event in run.mutations if event.op != "close"]
    assert ops == [("mkdir", "a"), ("mkdir", "a/b"), ("create", "a/c"), ("unlink", "a/c")]


def test_two_jobs_traced_at_once_from_two_threads_each_see_their_own(tmp_path: Path) -> None:
    found: dict[str, TracedRun] = {}

    def trace(name: str) -> None:
        directory = tmp_path / name
        directory.mkdir()
        found[name] = _run(directory, SAVE)

    threads = [threading.Thread(target=trace, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for run in found.values():
        assert run.returncode == 0 and len(run.mutations) == 8


def test_power_loss_drops_unsynced_data_and_names_not_made_durable(tmp_path: Path) -> None:
    """temp file, rename, no fsync at all: zero length under its final name (data), or gone
    (names); with fsyncs of the file and the directory it survives both."""
    careless = """
    import os, sys
    root = sys.argv[1]
    open(os.path.join(root, "old"), "wb").write(b"old")
    d = os.open(root, os.O_RDONLY | os.O_DIRECTORY); os.fsync(d); os.close(d)
    with open(os.path.join(root, "new.tmp"), "wb") as f:
        f.write(b"new bytes")
    os.replace(os.path.join(root, "new.tmp"), os.path.join(root, "new"))
    """
    careful = careless.replace(
        'f.write(b"new bytes")', 'f.write(b"new bytes"); f.flush(); os.fsync(f.fileno())'
    ).replace(
        'os.path.join(root, "new"))',
        'os.path.join(root, "new"))\n    d = os.open(root, os.O_RDONLY | os.O_DIRECTORY); '
        "os.fsync(d); os.close(d)",
    )
    images = {}
    for name, body in (("careless", careless), ("careful", careful)):
        directory = tmp_path / name
        directory.mkdir()
        copies = directory / "copies"
        copies.mkdir()
        run = _run(directory, body, copy_dir=copies)
        assert run.returncode == 0, (directory / "err.log").read_text()
        model = PowerLossModel.replay(run.events, copies)
        for kind in (DATA_LOSS, NAME_LOSS):
            image = directory / kind
            shutil.copytree(directory / "run", image)
            apply_power_loss(model, image, kind, directory / "scratch")
            images[name, kind] = {p.name: p.read_bytes() for p in sorted(image.iterdir())}
    assert images["careless", DATA_LOSS] == {"new": b"", "old": b""}
    assert images["careless", NAME_LOSS] == {"old": b""}
    assert images["careful", DATA_LOSS] == {"new": b"new bytes", "old": b""}
    assert images["careful", NAME_LOSS] == {"new": b"new bytes", "old": b""}


def _warm_run(tmp_path: Path, starter, name: str, body: str, **options: object) -> TracedRun:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    root = tmp_path / name
    root.mkdir()
    return run_traced(
        [sys.executable, str(script), str(root)],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"},
        cwd=tmp_path,
        stdout_path=tmp_path / f"{name}.out",
        stderr_path=tmp_path / f"{name}.err",
        root=root,
        timeout=60.0,
        starter=starter,
        name=name,
        **options,  # type: ignore[arg-type]
    )


def _calls(run: TracedRun) -> list[tuple]:
    return [(e.seq, e.op, e.path, e.target, e.offset, e.length, e.killed) for e in run.events]


def test_a_job_forked_from_a_warm_server_is_traced_as_a_fresh_one(tmp_path: Path) -> None:
    """trace_pid: the server's fork waits for its tracer, installs the filter, and is seen
    call by call as trace_job's fresh child is; a kill lands before the same call. The
    server is started from a thread that ends before the next job (its parent-death signal
    follows the thread that started it): the next job still forks from it."""
    from trainparity._internal.processes.warm.starter import ChildStarter

    for place in ("fresh", "fresh_killed"):
        (tmp_path / place).mkdir()
    fresh = _run(tmp_path / "fresh", SAVE)
    fresh_killed = _run(tmp_path / "fresh_killed", SAVE, kill_at=3)
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=60.0)
    try:
        found: dict[str, TracedRun] = {}
        first = threading.Thread(
            target=lambda: found.update(warm=_warm_run(tmp_path, starter, "warm", SAVE))
        )
        first.start()
        first.join()
        killed = _warm_run(tmp_path, starter, "warm_killed", SAVE, kill_at=3)
        assert starter.report["warm"] == ["warm", "warm_killed"], starter.report
    finally:
        starter.close()
    assert found["warm"].returncode == 0 and killed.signal == 9 and killed.killed
    assert _calls(found["warm"]) == _calls(fresh)
    assert _calls(killed) == _calls(fresh_killed)
    assert (tmp_path / "warm_killed" / "ck" / "a.tmp").read_bytes() == b"0123456789"
