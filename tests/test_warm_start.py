"""Warm starts: a child forked from the warm server behaves as a fresh interpreter, compared side by side.

Each scenario runs the same command fresh (the C core's spawn) and warm (a
ChildStarter's server) and compares what a program can see: exit status,
stdout and stderr byte for byte (argv, sys.path[0], __main__'s attributes,
tracebacks, SystemExit messages, atexit output, and what finalization
does at exit: __del__ of module globals, a buffered file left unclosed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from trainparity import Outcome, check_resume
from trainparity._internal.distributed.rank_processes import rank_evidence, read_rank_exits
from trainparity._internal.processes.group import (
    ChildGroup,
    ChildLaunchError,
    ChildSpec,
    spawn_child,
)
from trainparity._internal.processes.warm import child as child_side
from trainparity._internal.processes.warm import server_handle
from trainparity._internal.processes.warm.pool import SharedWarmServers
from trainparity._internal.processes.warm.starter import ChildStarter, checked_start, warm_refusal

from tests.test_report_pins import GOLDEN, pinned_form

REPOSITORY = Path(__file__).resolve().parent.parent

PROBE = """\
import atexit, os, sys
print("argv", sys.argv, "orig", sys.orig_argv[1:])
print("path0", sys.path[0], "cwd", os.getcwd())
main = sys.modules["__main__"]
print("main", __name__, getattr(main, "__file__", None), getattr(main, "__cached__", "-"))
print("spec", getattr(__spec__, "name", None), "package", __package__)
print("loader", type(__loader__).__name__ if not isinstance(__loader__, type) else __loader__.__name__)
print("stdin", repr(sys.stdin.read()), "env", os.environ.get("PROBE_MARK"))
print("last variables", list(os.environ)[-2:], "executable", sys.executable)
print("to stderr", file=sys.stderr)
atexit.register(print, "atexit ran")
class Finalized:
    def __del__(self):
        print("__del__ ran at exit")
keeper = Finalized()
unclosed = open(os.path.join(os.environ["TRAINPARITY_PROBE_OUT"], "unclosed.txt"), "a")
unclosed.write(sys.argv[-1] + " flushed at exit;")
action = sys.argv[1] if len(sys.argv) > 1 else "ok"
if action == "raise":
    def inner():
        raise RuntimeError("the probe failed")
    inner()
if action == "exit-text":
    sys.exit("a message to stderr")
if action == "exit-3":
    sys.exit(3)
if action == "sigterm":
    os.kill(os.getpid(), 15)
"""


@pytest.fixture
def probe_dir(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "probe.py").write_text(PROBE)
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


def _environment(**extra: str) -> dict[str, str]:
    # One thread per child (frugal; a torchrun agent forks its ranks warm only with it set),
    # and the same server variables for every test that sets none of its own: their children
    # share the module's warm servers (`starter`), as a suite's checks share theirs.
    return {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "PROBE_MARK": "mark",
        **extra,
    }


def _run(launcher, name: str, argv: list[str], cwd: Path, out: Path, env=None, timeout=120):
    """Run one child through `launcher`; (exit code, signal, stdout, stderr, result)."""
    spec = ChildSpec(
        name=name,
        argv=argv,
        cwd=cwd,
        env=env or _environment(),
        stdout_path=out / f"{name}.out",
        stderr_path=out / f"{name}.err",
    )
    with ChildGroup(launcher=launcher) as group:
        group.start(spec, timeout=timeout)
        result = group.wait_for(name)
    stdout = (out / f"{name}.out").read_text()
    stderr = (out / f"{name}.err").read_text()
    return result.exit_code, result.signal, stdout, stderr, result


@pytest.fixture(scope="module")
def module_servers():
    """The warm servers this module's starters borrow and give back, closed with the module.

    Each server imports torch (1.5 to 4 s of CPU): tests whose children have the same server
    variables and preloads fork them from one server, as the checks of a suite do
    (shared_warm_servers). A server is as pristine after serving a test as before, which each
    later test that forks from it checks again. The module's own, not the session's, so that
    its servers (their variables are this module's alone) push out none of the session's.
    The starts that keep a server of their own (no fixed hash seed, a starter without shared
    servers) are tested below, each with its own.
    """
    servers = SharedWarmServers()
    yield servers
    servers.close()


@pytest.fixture
def starter(tmp_path, module_servers):
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120, shared=module_servers)
    yield starter
    starter.close()


SCENARIOS = [
    ("script", ["probe.py"]),
    ("script-args", ["probe.py", "ok", "--flag", "x y"]),
    ("script-raise", ["probe.py", "raise"]),
    ("script-exit-text", ["probe.py", "exit-text"]),
    ("script-exit-3", ["probe.py", "exit-3"]),
    ("script-sigterm", ["probe.py", "sigterm"]),
    ("script-in-subdirectory", ["pkg/probe.py", "ok"]),
    ("module", ["-m", "pkg.probe", "ok"]),
    ("module-raise", ["-m", "pkg.probe", "raise"]),
    ("code", ["-c", "import sys; print(sys.argv, repr(sys.path[0])); 1/0", "arg"]),
    # How plan_command passes a phase plan: env sets the variables (one replaced where it
    # stands, one appended), then execs python.
    ("env-script", ["probe.py", "ok"]),
    ("env-module-raise", ["-m", "pkg.probe", "raise"]),
]
ENV_ASSIGNMENTS = ["PROBE_MARK=replaced", "PROBE_ADDED=x=y"]


def test_a_warm_child_is_indistinguishable_from_a_fresh_one(probe_dir, starter, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name, arguments in SCENARIOS:
        argv = [sys.executable, *arguments]
        if name.startswith("env-"):
            argv = ["env", *ENV_ASSIGNMENTS, *argv]
        unclosed = probe_dir / "unclosed.txt"
        # Our prefix: a per-phase variable (as a check's own are), not in the server's key.
        environment = _environment(TRAINPARITY_PROBE_OUT=str(probe_dir))
        fresh = _run(spawn_child, f"{name}-fresh", argv, probe_dir, out, environment)
        fresh_file = unclosed.read_text() if unclosed.exists() else None
        unclosed.unlink(missing_ok=True)
        warm = _run(starter.launch, f"{name}-warm", argv, probe_dir, out, environment)
        warm_file = unclosed.read_text() if unclosed.exists() else None
        unclosed.unlink(missing_ok=True)
        assert warm[:4] == fresh[:4], name
        assert warm_file == fresh_file, name
        assert f"{name}-warm" in starter.report["warm"]
    assert starter.report["fresh"] == {}
    argv = [sys.executable, "probe.py", "raise"]
    raised = _run(
        spawn_child, "raised", argv, probe_dir, out, _environment(TRAINPARITY_PROBE_OUT=str(out))
    )
    assert raised[0] == 1 and "RuntimeError: the probe failed" in raised[3]  # compared above
    assert "__del__ ran at exit" in raised[2]
    env_script = (out / "env-script-warm.out").read_text()
    assert "env replaced" in env_script  # compared with the fresh one's above
    assert "last variables ['TRAINPARITY_PROBE_OUT', 'PROBE_ADDED']" in env_script
    assert (out / "unclosed.txt").read_text() == "raise flushed at exit;"  # compared above


# A finalizer registered before the script's own operator library runs after that library's
# (newest first), as the last thing a fresh interpreter's atexit does.
LIBRARIES_AT_EXIT = """\
import torch, weakref
def registered(name):
    try:
        torch._C._dispatch_find_schema_or_throw(name, "")
    except RuntimeError:
        return False
    return True
class Marker:
    pass
def at_exit():
    print("own", registered("trainparity_probe::twice"), "torch's", registered("prims::abs"))
marker = Marker()
weakref.finalize(marker, at_exit)
library = torch.library.Library("trainparity_probe", "DEF")
library.define("twice(Tensor x) -> Tensor")
"""


def test_a_warm_childs_own_operator_library_is_unregistered_at_exit(tmp_path, starter):
    (tmp_path / "libraries.py").write_text(LIBRARIES_AT_EXIT)
    argv = [sys.executable, "libraries.py"]
    code, _, stdout, stderr, _ = _run(starter.launch, "warm", argv, tmp_path, tmp_path)
    assert starter.report["warm"] == ["warm"]
    # torch's prims library was defined first, so a fresh interpreter unregisters it last.
    assert (code, stdout, stderr) == (0, "own False torch's True\n", "")


def test_the_servers_operator_libraries_are_left_registered_and_the_childs_own_are_not():
    """exit_as_fresh skips the finalizers of what the server imported, not of what the child made."""
    server_libraries = child_side._library_finalizers()
    library = torch.library.Library("trainparity_probe_kept", "DEF")
    (own_finalizer,) = set(child_side._library_finalizers()) - set(server_libraries)
    saved = child_side._SERVER_LIBRARY_FINALIZERS
    try:
        child_side._SERVER_LIBRARY_FINALIZERS = server_libraries
        child_side._keep_server_libraries()
        assert server_libraries and not any(finalizer.atexit for finalizer in server_libraries)
        assert own_finalizer not in server_libraries and own_finalizer.atexit
    finally:
        child_side._SERVER_LIBRARY_FINALIZERS = saved
        for finalizer in server_libraries:
            finalizer.atexit = True
        library._destroy()


PRISTINE = """\
import json, os, random, sys
import multiprocessing, numpy, torch
print(json.dumps({
    "ours": sorted(m for m in sys.modules if m.startswith("trainparity") or "warm" in m),
    "random": random.random(),
    "numpy": float(numpy.random.rand()),
    "authkey": multiprocessing.current_process().authkey.hex(),
    "hash": hash("a string"),
    "seed": os.environ.get("PYTHONHASHSEED"),
    "cuda": torch.cuda.is_initialized(),
    "threads_env": os.environ.get("OMP_NUM_THREADS"),
    "torch_threads": torch.get_num_threads(),
}))
"""


def test_warm_children_hold_nothing_of_the_check_and_redraw_their_random_state(tmp_path, starter):
    (tmp_path / "pristine.py").write_text(PRISTINE)
    argv = [sys.executable, "pristine.py"]
    env = _environment(OMP_NUM_THREADS="1")
    seen = [
        json.loads(_run(starter.launch, f"warm{index}", argv, tmp_path, tmp_path, env)[2])
        for index in range(2)
    ]
    fresh = json.loads(_run(spawn_child, "fresh", argv, tmp_path, tmp_path, env)[2])
    assert starter.report["warm"] == ["warm0", "warm1"]
    for child in seen:
        assert child["ours"] == [] and child["cuda"] is False
        # The hash seed is the server's, which the phases' PYTHONHASHSEED fixed.
        assert (child["hash"], child["seed"]) == (fresh["hash"], "0")
        assert (child["threads_env"], child["torch_threads"]) == ("1", fresh["torch_threads"])
    for key in ("random", "numpy", "authkey"):
        assert len({seen[0][key], seen[1][key], fresh[key]}) == 3, key


def test_without_a_hash_seed_each_warm_child_gets_its_own(tmp_path, starter):
    (tmp_path / "pristine.py").write_text(PRISTINE)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}
    runs = [
        json.loads(
            _run(
                starter.launch,
                f"c{index}",
                [sys.executable, "pristine.py"],
                tmp_path,
                tmp_path,
                env,
            )[2]
        )
        for index in range(2)
    ]
    assert starter.report["warm"] == ["c0", "c1"]
    assert runs[0]["hash"] != runs[1]["hash"]
    # Each server's seed is its own; a child's environment is the phase's, as a fresh one's.
    assert runs[0]["seed"] is runs[1]["seed"] is None
    assert hash("a string") == hash("a string")  # (this process's own seed is untouched)


SET_ORDER_CASE = """\
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("set_order_train.py")


class SetOrderCase:
    name = "set_order"
    split_step = 1
    total_step = 2

    def command(self, plan):
        return [sys.executable, str(SCRIPT), str(plan.run_dir)]

    def checkpoint_path(self, run_dir):
        return run_dir / "order.txt"

    def observe_checkpoint(self, path):
        return {"order": path.read_text()}
"""
SET_ORDER_TRAIN = """\
import sys
from pathlib import Path
words = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
(Path(sys.argv[1]) / "order.txt").write_text(" ".join(words))
"""


def test_baselines_forked_warm_still_abstain_on_a_script_iterating_a_set_of_strings(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    (tmp_path / "set_order_case.py").write_text(SET_ORDER_CASE)
    (tmp_path / "set_order_train.py").write_text(SET_ORDER_TRAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Two baselines agree by chance with probability 1/8! at most; three tries make it negligible.
    # Phases one after another: the baselines' disagreement then ends the check before
    # candidate_split starts, whose server (each phase's its own here) would import torch for
    # nothing.
    for _attempt in range(3):
        result = check_resume(
            "set_order_case:SetOrderCase", cwd=tmp_path, start="warm", timeout=120, parallel=False
        )
        if result.outcome is Outcome.ABSTAIN:
            break
    assert result.outcome is Outcome.ABSTAIN, result.message
    start = result.environment["child_start"]
    assert {"baseline_a", "baseline_b"} <= set(start["warm"]), start
    assert "candidate_split" not in start["warm"], start


def test_other_commands_start_fresh_and_the_report_says_why(tmp_path, starter):
    for name, argv in (
        ("shell", ["sh", "-c", "echo shell"]),
        ("option", [sys.executable, "-u", "-c", "print('u')"]),
        ("other", [sys.executable + "-not-this-one", "x.py"]),
    ):
        if name == "other":
            assert warm_refusal(argv, os.environ) is not None
            continue
        code, _, stdout, _, _ = _run(starter.launch, name, argv, tmp_path, tmp_path)
        assert code == 0 and stdout.strip() in {"shell", "u"}
    # env with an option of its own, or assignments env would not take as such: as they are.
    for name, argv in (
        ("env-option", ["env", "-u", "HOME", sys.executable, "-c", "print('u')"]),
        ("env-odd-name", ["env", "A-B=1", sys.executable, "-c", "print('u')"]),
        ("env-nothing", ["env", "A=1"]),
    ):
        code, _, stdout, _, _ = _run(starter.launch, name, argv, tmp_path, tmp_path)
        assert code == 0 and (stdout.strip() == "u" or "A=1" in stdout), name
        assert "is not this Python interpreter" in starter.report["fresh"][name], name
    assert set(starter.report["fresh"]) == {
        "shell", "option", "env-option", "env-odd-name", "env-nothing"
    }  # fmt: skip
    assert starter.report["warm"] == []
    # torchrun_command's form is `python -m`, forked like any module (its agent skips importing
    # torch); the `torchrun` script is another program.
    torchrun = [sys.executable, "-m", "torch.distributed.run", "x.py"]
    assert warm_refusal(torchrun, os.environ) is None
    assert warm_refusal(["torchrun", "x.py"], os.environ) is not None


SHOW_ENVIRONMENT = """
import json, os
with open("/proc/self/environ", "rb") as handle:
    shown = [entry.decode() for entry in handle.read().split(b"\\0") if entry]
print(json.dumps(shown))
"""


def test_proc_shows_a_warm_childs_environment_as_a_fresh_ones(tmp_path, starter):
    environment = _environment(TRAINPARITY_PHASE_TAG="tag-of-this-phase")
    code, _, stdout, stderr, _ = _run(
        starter.launch, "shown", [sys.executable, "-c", SHOW_ENVIRONMENT], tmp_path, tmp_path,
        environment,
    )  # fmt: skip
    assert code == 0, stderr
    assert starter.report["warm"] == ["shown"]
    # What ps e, psutil and our rank watcher read: the phase's variables, in the order given.
    assert json.loads(stdout) == [f"{name}={value}" for name, value in environment.items()]
    # Through env, as a phase plan is passed: what env's exec would show, fresh or warm. One
    # variable replaced where it stands, one appended (the assignments of the test above:
    # their children share a server).
    argv = ["env", "TRAINPARITY_PHASE_TAG=set-by-env", *ENV_ASSIGNMENTS, sys.executable, "-c",
            SHOW_ENVIRONMENT]  # fmt: skip
    shown = [
        json.loads(_run(launcher, name, argv, tmp_path, tmp_path, environment)[2])
        for name, launcher in (("fresh", spawn_child), ("warm", starter.launch))
    ]
    assert starter.report["warm"] == ["shown", "warm"]
    assert shown[0] == shown[1]
    assert shown[1][-1] == "PROBE_ADDED=x=y" and "TRAINPARITY_PHASE_TAG=set-by-env" in shown[1]
    marks = [entry for entry in shown[1] if entry.startswith("PROBE_MARK=")]
    assert marks == ["PROBE_MARK=replaced"]
    assert shown[1].index(marks[0]) == list(environment).index("PROBE_MARK")  # where it stood


def test_a_torchrun_agent_whose_environment_proc_cannot_show_starts_fresh(tmp_path, starter):
    # A phase's own variables (not its server's) longer than the room a server keeps for them.
    environment = _environment(TRAINPARITY_PROBE="x" * 40000)
    argv = [sys.executable, "-m", "torch.distributed.run", "--help"]
    code, _, stdout, _, _ = _run(starter.launch, "agent", argv, tmp_path, tmp_path, environment)
    assert code == 0 and "usage" in stdout
    assert starter.report["warm"] == []
    assert "rank watcher" in starter.report["fresh"]["agent"]


RANK_PROBE = """\
import json, os, sys
preloaded = "torch" in sys.modules
seen = {
    "parent": os.getppid(),
    "own_session": os.getsid(0) == os.getpid(),
    "orig_argv": sys.orig_argv[1:],
    "argv": sys.argv,
    "unbuffered": (sys.stdout.write_through, sys.stdout.line_buffering, sys.stderr.write_through),
    "buffer": type(sys.stdout.buffer).__name__,
    "hash": hash("a string"),
    "variables": sorted(os.environ),
    "descriptors": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
}
sys.stdout.write("rank " + os.environ["RANK"] + " says hello\\n")  # one write: ranks interleave
with open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"] + ".json"), "w") as out:
    json.dump({"seen": seen, "preloaded": preloaded}, out)
"""


AGENT = [sys.executable, "-m", "torch.distributed.run"]


def _torchrun_probe(
    launcher, name: str, tmp_path: Path, environment: dict[str, str], agent: list[str] = AGENT
):
    """Each rank's view of itself, the agent's pid and stdout, for a 2-rank torchrun of RANK_PROBE."""
    out = tmp_path / name
    out.mkdir()
    (out / "probe.py").write_text(RANK_PROBE)
    argv = [*agent, "--standalone", "--nproc-per-node=2", "probe.py", str(out)]
    code, _, stdout, stderr, result = _run(launcher, name, argv, out, out, environment)
    assert code == 0, stderr
    ranks = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    for rank in ranks:
        rank["seen"]["orig_argv"][-1] = rank["seen"]["argv"][-1] = "OUT"
    return ranks, result.pid, stdout


def test_a_warm_torchrun_agent_forks_its_ranks_warm_and_they_see_what_fresh_ones_see(
    tmp_path, starter
):
    # OMP_NUM_THREADS set, else torchrun sets it for the ranks and they start fresh.
    environment = _environment(OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))  # TMPDIR: torchrun's logs
    fresh, fresh_agent, fresh_stdout = _torchrun_probe(spawn_child, "fresh", tmp_path, environment)
    warm, warm_agent, warm_stdout = _torchrun_probe(starter.launch, "warm", tmp_path, environment)
    assert starter.report["warm"] == ["warm"]
    assert [rank["preloaded"] for rank in fresh] == [False, False]
    assert [rank["preloaded"] for rank in warm] == [True, True]  # forked from the zygote
    for rank in fresh:
        assert rank["seen"]["parent"] == fresh_agent
        rank["seen"]["parent"] = "the agent"
    for rank in warm:
        assert rank["seen"]["parent"] == warm_agent  # the agent's own child, as Popen makes it
        rank["seen"]["parent"] = "the agent"
    assert [rank["seen"] for rank in warm] == [rank["seen"] for rank in fresh]
    assert warm[0]["seen"]["unbuffered"] == [True, False, True]  # python -u's streams
    for stdout in (fresh_stdout, warm_stdout):
        assert "rank 0 says hello" in stdout and "rank 1 says hello" in stdout


def test_the_torchrun_script_beside_this_interpreter_is_forked_warm_as_its_module(
    tmp_path, starter
):
    # pip's console script runs torch.distributed.run's main, as `python -m` does: a template's
    # `torchrun` is forked warm, and its ranks see what the script's fresh ones see.
    script = Path(sys.executable).with_name("torchrun")
    if not script.is_file():
        pytest.skip("no torchrun script beside this interpreter")
    environment = _environment(OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    fresh, _, fresh_stdout = _torchrun_probe(
        spawn_child, "fresh", tmp_path, environment, agent=[str(script)]
    )
    warm, _, warm_stdout = _torchrun_probe(
        starter.launch, "warm", tmp_path, environment, agent=[str(script)]
    )
    assert starter.report["warm"] == ["warm"]
    assert [rank["preloaded"] for rank in warm] == [True, True]
    for rank in fresh + warm:
        rank["seen"]["parent"] = "the agent"
    assert [rank["seen"] for rank in warm] == [rank["seen"] for rank in fresh]
    assert "rank 1 says hello" in fresh_stdout and "rank 1 says hello" in warm_stdout
    # Another console script of this interpreter is another program: it starts fresh.
    other = tmp_path / "other-script"
    other.write_text(
        f"#!{sys.executable}\nimport sys\nfrom json.tool import main\nsys.exit(main())\n"
    )
    other.chmod(0o755)
    code, _, _, _, _ = _run(starter.launch, "other", [str(other), "--help"], tmp_path, tmp_path)
    assert code == 0 and "is not this Python interpreter" in starter.report["fresh"]["other"]


DEEPSPEED_RANK_PROBE = """\
import json, os, sys
preloaded = "deepspeed" in sys.modules  # imported by the zygote's server, never by this script
launch = os.getppid()
with open(f"/proc/{launch}/cmdline", "rb") as handle:
    # A warm process pads its command with NULs where the server's was longer (as ps reads it).
    launch_command = [word.decode() for word in handle.read().rstrip(b"\\0").split(b"\\0")]
with open(f"/proc/{launch}/stat", "rb") as handle:
    runner = int(handle.read().rpartition(b")")[2].split()[1])
seen = {
    "launch_command": launch_command,
    "same_session_and_group_as_the_runner": (
        os.getsid(0) == os.getsid(runner), os.getpgid(0) == os.getpgid(runner)
    ),
    "orig_argv": sys.orig_argv[1:],
    "argv": sys.argv,
    "unbuffered": (sys.stdout.write_through, sys.stdout.line_buffering, sys.stderr.write_through),
    "hash": hash("a string"),
    "variables": sorted(os.environ),
    "descriptors": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
}
sys.stdout.write("rank " + os.environ["RANK"] + " says hello\\n")
# DeepSpeed puts --local_rank=N before the script's own arguments.
with open(os.path.join(sys.argv[-1], "rank" + os.environ["RANK"] + ".json"), "w") as out:
    json.dump({"seen": seen, "preloaded": preloaded, "runner": runner}, out)
"""


@pytest.fixture
def deepspeed_script() -> Path:
    """DeepSpeed's `deepspeed` launcher script beside this interpreter (skips without it)."""
    pytest.importorskip("deepspeed")
    script = Path(sys.executable).with_name("deepspeed")
    if not script.is_file():
        pytest.skip("no deepspeed script beside this interpreter")
    return script


def test_deepspeeds_launcher_forked_warm_forks_launch_py_and_its_ranks_as_fresh_ones_start(
    tmp_path, starter, deepspeed_script
):
    # The `deepspeed` script: its runner forked warm as the script the kernel would run, its
    # `python -u -m deepspeed.launcher.launch` forked from the runner's zygote, each rank from
    # launch.py's; every rank sees what the fresh launcher's rank sees.
    environment = _environment(DS_ACCELERATOR="cpu")
    views = {}
    for name, launcher in (("fresh", spawn_child), ("warm", starter.launch)):
        out = tmp_path / name
        out.mkdir()
        (out / "probe.py").write_text(DEEPSPEED_RANK_PROBE)
        argv = [str(deepspeed_script), "--num_gpus", "2", "--master_port", "29517"]
        argv += ["probe.py", str(out)]
        code, _, stdout, stderr, result = _run(launcher, name, argv, out, out, environment)
        assert code == 0, stderr
        assert "rank 0 says hello" in stdout and "rank 1 says hello" in stdout
        ranks = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
        assert [rank["runner"] for rank in ranks] == [result.pid, result.pid]
        for rank in ranks:
            for command in (rank["seen"]["orig_argv"], rank["seen"]["argv"]):
                command[command.index(str(out))] = "OUT"
            command = rank["seen"]["launch_command"]
            command[command.index(str(out))] = "OUT"
        views[name] = ranks
    assert starter.report["warm"] == ["warm"], starter.report
    assert [rank["preloaded"] for rank in views["fresh"]] == [False, False]
    assert [rank["preloaded"] for rank in views["warm"]] == [True, True]
    assert [rank["seen"] for rank in views["warm"]] == [rank["seen"] for rank in views["fresh"]]
    launch = views["warm"][0]["seen"]["launch_command"]
    assert launch[:4] == [sys.executable, "-u", "-m", "deepspeed.launcher.launch"]
    assert views["warm"][0]["seen"]["same_session_and_group_as_the_runner"] == [True, True]
    assert views["warm"][0]["seen"]["unbuffered"] == [True, False, True]  # python -u's streams


def test_a_failing_rank_under_deepspeeds_launcher_forked_warm_fails_the_phase_as_fresh(
    tmp_path, starter, deepspeed_script
):
    # launch.py polls its ranks, stops the others when one fails and exits with its status; the
    # runner exits with launch.py's. A forked rank is reaped by launch.py's own Popen.
    probe = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    sys.exit(3)\n"
        "time.sleep(600)  # rank 0 waits until launch.py stops it (else the run's timeout)\n"
    )
    (tmp_path / "probe.py").write_text(probe)
    argv = [str(deepspeed_script), "--num_gpus", "2", "--master_port", "29518", "probe.py"]
    environment = _environment(DS_ACCELERATOR="cpu")
    # (exit code, signal): a phase that ran into _run's timeout would end by a signal instead.
    ends = {
        name: _run(launcher, name, argv, tmp_path, tmp_path, environment)[:2]
        for name, launcher in (("fresh", spawn_child), ("warm", starter.launch))
    }
    assert starter.report["warm"] == ["warm"]
    assert ends["warm"] == ends["fresh"] and ends["fresh"][0] not in (0, None), ends


def test_ranks_start_fresh_under_a_warm_agent_when_told_to(tmp_path, starter):
    environment = _environment(
        OMP_NUM_THREADS="1", TMPDIR=str(tmp_path), TRAINPARITY_WARM_RANKS="0"
    )
    warm, _, _ = _torchrun_probe(starter.launch, "warm", tmp_path, environment)
    assert starter.report["warm"] == ["warm"]
    assert [rank["preloaded"] for rank in warm] == [False, False]


def test_an_unknown_warm_ranks_value_starts_the_agent_fresh_and_says_why(tmp_path, starter):
    environment = _environment(TRAINPARITY_WARM_RANKS="yes")
    argv = [sys.executable, "-m", "torch.distributed.run", "--help"]
    code, _, _, _, _ = _run(starter.launch, "agent", argv, tmp_path, tmp_path, environment)
    assert code == 0 and starter.report["warm"] == []
    assert starter.report["fresh"]["agent"] == (
        "TRAINPARITY_WARM_RANKS must be '1' (fork a torchrun agent's ranks warm, the default) "
        "or '0' (exec them), not 'yes'; started fresh"
    )


def test_ranks_without_a_fixed_hash_seed_start_fresh_under_a_warm_agent(tmp_path, starter):
    environment = _environment(OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    del environment["PYTHONHASHSEED"]  # fresh ranks would each draw their own
    warm, _, _ = _torchrun_probe(starter.launch, "warm", tmp_path, environment)
    assert starter.report["warm"] == ["warm"]
    assert [rank["preloaded"] for rank in warm] == [False, False]


QUICK_RANKS = """\
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(3)  # at once: before any sample of the rank watcher could see it
time.sleep(60)  # rank 0 waits until torchrun stops it
"""


@pytest.mark.parametrize("forked", [True, False])
def test_a_warm_agent_measures_the_exit_of_each_rank_it_forked(tmp_path, starter, forked):
    # Without OMP_NUM_THREADS, torchrun sets it per rank and the ranks start fresh.
    environment = _environment(TMPDIR=str(tmp_path))
    if forked:
        environment["OMP_NUM_THREADS"] = "1"
    else:
        environment.pop("OMP_NUM_THREADS", None)
    exits = tmp_path / "rank_exits.jsonl"
    environment["TRAINPARITY_RANK_EXITS_FILE"] = str(exits)
    (tmp_path / "quick.py").write_text(QUICK_RANKS)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            "quick.py"]  # fmt: skip
    code, _, _, _, _ = _run(starter.launch, "agent", argv, tmp_path, tmp_path, environment)
    assert code != 0 and starter.report["warm"] == ["agent"]
    if not forked:  # exec'd ranks are sampled, as under a fresh agent
        assert not exits.exists()
        return
    rows = rank_evidence(
        (),
        phase_returncode=code,
        stderr_path=tmp_path / "agent.err",
        measured=read_rank_exits(exits),
    )
    # Exact: rank 1's own code, and rank 0 ended by torchrun's SIGTERM (a report says neither).
    assert [(row.rank, row.local_rank, row.returncode) for row in rows] == [
        (0, 0, -signal.SIGTERM),
        (1, 1, 3),
    ]
    assert all(row.sample_interval_seconds is None for row in rows)
    assert all(row.user_seconds + row.system_seconds > 0 and row.peak_rss_bytes > (1 << 20)
               for row in rows)  # fmt: skip


@pytest.mark.parametrize(
    ("cwd", "stdout_dir", "step"),
    [("missing", ".", "chdir"), (".", "missing", "stdout")],
)
def test_a_launch_failure_names_the_same_step_as_a_fresh_one(
    tmp_path, starter, cwd, stdout_dir, step
):
    spec = ChildSpec(
        name="failing",
        argv=[sys.executable, "-c", "pass"],
        cwd=tmp_path / cwd,
        env=_environment(),
        stdout_path=tmp_path / stdout_dir / "out.log",
        stderr_path=tmp_path / "err.log",
    )
    errors = []
    for launcher in (spawn_child, starter.launch):
        with pytest.raises(ChildLaunchError) as caught:
            launcher(spec)
        errors.append((caught.value.step, caught.value.errno))
    assert errors[0] == errors[1] == (step, errors[0][1])


def test_a_warm_child_past_its_timeout_is_terminated_like_a_fresh_one(tmp_path, starter):
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    for name, launcher in (("fresh", spawn_child), ("warm", starter.launch)):
        code, killed_by, _, _, result = _run(launcher, name, argv, tmp_path, tmp_path, timeout=3)
        assert (result.timed_out, code, killed_by) == (True, None, signal.SIGTERM), name


DRIVER = """\
import os, sys, time
from pathlib import Path
from trainparity._internal.processes.group import ChildGroup, ChildSpec
from trainparity._internal.processes.warm.starter import ChildStarter
out = Path(sys.argv[1])
starter = ChildStarter("warm", log_dir=out, timeout=120)
group = ChildGroup(launcher=starter.launch)
spec = ChildSpec(name="sleeper", argv=[sys.executable, "-c", "import time; time.sleep(120)"],
                 cwd=out, env={**os.environ, "PYTHONHASHSEED": "0"},
                 stdout_path=out / "s.out", stderr_path=out / "s.err")
child = group.start(spec, timeout=None)
(server,) = starter._servers.values()
print(child, server.pid, flush=True)
time.sleep(120)
"""


def _cmdline(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().rstrip(b"\0").split(b"\0")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_server_and_its_children_die_with_the_check(tmp_path):
    (tmp_path / "driver.py").write_text(DRIVER)
    driver = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    child, server = map(int, driver.stdout.readline().split())
    assert _alive(child) and _alive(server)
    # ps and pgrep see the child's command, not the server's, once it has set itself up
    # (as a fresh child shows its parent's until its exec).
    command = [os.fsencode(sys.executable), b"-c", b"import time; time.sleep(120)"]
    deadline = time.monotonic() + 60
    while _cmdline(child) != command and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _cmdline(child) == command
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 30
    while (_alive(child) or _alive(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(server)


def test_children_differing_in_their_rank_or_our_variables_share_a_server(tmp_path, starter):
    code = "import os; print(os.environ['RANK'], os.environ['TRAINPARITY_PHASE_TAG'])"
    for rank in range(2):
        env = _environment(RANK=str(rank), MASTER_PORT=str(29500 + rank))
        env["TRAINPARITY_PHASE_TAG"] = f"tag{rank}"
        _, _, stdout, _, _ = _run(
            starter.launch, f"rank{rank}", [sys.executable, "-c", code], tmp_path, tmp_path, env
        )
        assert stdout == f"{rank} tag{rank}\n"
    assert len(starter._servers) == 1 and starter.report["warm"] == ["rank0", "rank1"]


def _own_children() -> set[int]:
    """Pids (zombies included) whose parent is this process."""
    me = str(os.getpid())
    children = set()
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if (
                entry.isdigit()
                and Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1] == me
            ):
                children.add(int(entry))
    return children


def test_a_forked_child_whose_reply_comes_too_late_is_killed_before_the_fresh_start(
    tmp_path, monkeypatch
):
    # A child blocks opening its stdout, a FIFO nobody reads yet: the server cannot report it
    # set up. Past the request's deadline the check falls back to a fresh start; the forked
    # child (already this process's) must not live on beside it, nor stay a zombie.
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120)
    try:
        _run(starter.launch, "first", [sys.executable, "-c", "pass"], tmp_path, tmp_path)
        starter.timeout = 1.0  # a request's deadline: the longer of this and _READY_SECONDS
        monkeypatch.setattr(server_handle, "_READY_SECONDS", 1.0)
        fifo = tmp_path / "stdout.fifo"
        os.mkfifo(fifo)
        spec = ChildSpec(
            name="stalled",
            argv=[sys.executable, "-c", "print('ran')"],
            cwd=tmp_path,
            env=_environment(),
            stdout_path=fifo,
            stderr_path=tmp_path / "stalled.err",
        )
        before = _own_children()
        reader = threading.Timer(3.0, lambda: readers.append(fifo.open("rb")))
        readers: list = []
        reader.start()  # after the deadline: lets the fresh child open its stdout
        try:
            pid = starter.launch(spec)
        finally:
            reader.join()
        with readers[0] as stdout:
            assert stdout.read() == b"ran\n"  # the fresh child's, alone
        os.waitpid(pid, 0)
        assert starter.report["fresh"]["stalled"] == (
            "the warm server failed (no reply within the timeout); started fresh"
        )
        assert _own_children() - before == set()
    finally:
        starter.close()


def test_the_start_mode_defaults_to_the_variable_then_fresh(monkeypatch):
    monkeypatch.delenv("TRAINPARITY_START", raising=False)
    assert checked_start(None) == "fresh"
    monkeypatch.setenv("TRAINPARITY_START", "warm")
    assert checked_start(None) == "warm"
    assert checked_start("fresh") == "fresh"
    with pytest.raises(ValueError, match="start must be 'fresh' or 'warm', not 'hot'"):
        checked_start("hot")
    monkeypatch.setenv("TRAINPARITY_START", "tepid")
    with pytest.raises(ValueError, match="TRAINPARITY_START must be"):
        checked_start(None)


def test_a_warm_check_of_the_quickstart_reports_its_warm_phases(tmp_path):
    result = check_resume(
        "trainparity.quickstarts.resume:CleanCase", start="warm", temporary_root=tmp_path
    )
    assert result.outcome is Outcome.PASS, result.message
    start = result.environment["child_start"]
    assert start["mode"] == "warm" and start["fresh"] == {}
    assert set(start["warm"]) == {
        "observer",
        "baseline_a",
        "baseline_b",
        "candidate_split",
        "candidate_resume",
    }
    # The same report as a fresh check's: the clean case's pinned report, which
    # test_report_pins.py checks a fresh check gives to the byte (and a fresh check reports no
    # child_start: test_resume_faults.py compares whole reports of both modes). Against the
    # pin rather than a fresh check run here, whose five fresh phases each import torch.
    pinned = json.loads((GOLDEN / "quickstart_resume.json").read_text(encoding="utf-8"))
    assert pinned_form(json.loads(json.dumps(result.to_dict()))) == pinned["clean"]


def test_a_server_preloads_the_torch_modules_named_in_the_preload_variable(tmp_path, starter):
    code = "import sys; print('torch._dynamo' in sys.modules)"
    outputs = []
    for name, preload in (("plain", ""), ("named", " torch._dynamo ,")):
        env = _environment(TRAINPARITY_WARM_PRELOAD=preload)
        _, _, stdout, _, _ = _run(
            starter.launch, name, [sys.executable, "-c", code], tmp_path, tmp_path, env
        )
        outputs.append(stdout)
    assert outputs == ["False\n", "True\n"]
    assert len(starter._servers) == 2 and starter.report["warm"] == ["plain", "named"]


def test_a_preload_that_is_not_torchs_own_starts_the_child_fresh_and_says_why(tmp_path, starter):
    env = _environment(TRAINPARITY_WARM_PRELOAD="torch._dynamo,json")
    _, _, stdout, _, _ = _run(
        starter.launch, "user", [sys.executable, "-c", "print('ran')"], tmp_path, tmp_path, env
    )
    assert stdout == "ran\n" and starter._servers == {}
    reason = starter.report["fresh"]["user"]
    assert reason.startswith("TRAINPARITY_WARM_PRELOAD names 'json'") and "started fresh" in reason


def test_a_server_preloads_an_installed_library_named_in_the_preload_variable(tmp_path, starter):
    # An installed library's module (here packaging.version, which importing torch does not
    # import) is imported by the server: the child finds it already there, as it finds torch.
    code = "import sys; print('packaging.version' in sys.modules)"
    env = _environment(TRAINPARITY_WARM_PRELOAD="packaging.version")
    _, _, stdout, _, _ = _run(
        starter.launch, "library", [sys.executable, "-c", code], tmp_path, tmp_path, env
    )
    assert stdout == "True\n" and starter.report["warm"] == ["library"]


def test_a_user_module_shadowing_a_named_library_starts_the_child_fresh_and_says_why(
    tmp_path, starter
):
    # The check finds `packaging` in site-packages, but the children's PYTHONPATH puts the
    # user's own first: the server's import finds that one, refuses to fork, and the child
    # starts fresh, importing the user's module itself when it runs.
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "packaging.py").write_text("LOADED_BY = 'the user'\n")
    code = "import sys, packaging; print('packaging' in sys.modules, packaging.LOADED_BY)"
    env = _environment(TRAINPARITY_WARM_PRELOAD="packaging", PYTHONPATH=str(tmp_path / "user"))
    _, _, stdout, _, _ = _run(
        starter.launch, "shadowed", [sys.executable, "-c", code], tmp_path, tmp_path, env
    )
    assert stdout == "True the user\n" and starter.report["warm"] == []
    reason = starter.report["fresh"]["shadowed"]
    assert "preloading packaging" in reason and str(tmp_path / "user") in reason, reason


def test_torchrun_launches_with_their_own_static_port_share_a_server(starter, tmp_path):
    # A check gives each torchrun launch with a static rendezvous a port of its own in
    # PET_MASTER_PORT (torchrun_argv.own_port), which torchrun reads when its main parses
    # the arguments: not a server variable, or every such launch would start a server.
    argv = [sys.executable, "-c", "import os; print(os.environ['PET_MASTER_PORT'])"]
    for name, port in (("first", "41001"), ("second", "41002")):
        env = _environment(PET_MASTER_PORT=port)
        code, _, stdout, stderr, _ = _run(starter.launch, name, argv, tmp_path, tmp_path, env)
        assert (code, stdout.strip()) == (0, port), stderr
    assert starter.report["warm"] == ["first", "second"] and len(starter._servers) == 1


TEMPORARY_PROBE = """\
import json, os, tempfile
import torch, torch._dynamo
directory = os.environ["TMPDIR"]
made = {name: oct(os.stat(os.path.join(directory, name)).st_mode & 0o7777)
        for name in sorted(os.listdir(directory))}
print(json.dumps({"tempdir": tempfile.tempdir, "gettempdir": tempfile.gettempdir(), "made": made}))
"""


def test_children_with_their_own_tmpdir_share_a_server_and_see_their_own_as_fresh_ones(
    tmp_path,
):
    # Each check's torchrun phases have their own TMPDIR: no server key, or no two checks'
    # torchrun phases could share one. torch's import asks tempfile for its directory and
    # torch._dynamo's makes its cache directory in it: the server does both in its own.
    # A starter without shared servers: its server is its own, reaped when it closes.
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120)
    try:
        argv = [sys.executable, "-c", TEMPORARY_PROBE]
        seen = {}
        for name in ("fresh", "warm-1", "warm-2"):
            temporary = tmp_path / f"tmp-{name}"
            temporary.mkdir()
            env = _environment(TMPDIR=str(temporary), TRAINPARITY_WARM_PRELOAD="torch._dynamo")
            env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the suite's (tests/temp_guard.py): in TMPDIR
            launch = spawn_child if name == "fresh" else starter.launch
            code, _, stdout, stderr, _ = _run(launch, name, argv, tmp_path, tmp_path, env)
            assert code == 0, stderr
            seen[name] = json.loads(stdout.replace(str(temporary), "<TMPDIR>"))
        assert seen["fresh"]["tempdir"] == seen["fresh"]["gettempdir"] == "<TMPDIR>"
        assert seen["fresh"]["made"], "torch._dynamo made no directory in TMPDIR: nothing compared"
        assert seen["warm-1"] == seen["warm-2"] == seen["fresh"]
        assert starter.report["warm"] == ["warm-1", "warm-2"] and len(starter._servers) == 1
        (server,) = starter._servers.values()
        assert server.temporary.parent == tmp_path / "servers"
        assert server.temporary.is_dir()  # the server's own: its imports made theirs there
    finally:
        starter.close()
    assert not server.temporary.exists()
    assert not Path(f"/proc/{server.pid}").exists()  # stopped and reaped: not even a zombie
