"""Multi-rank phases: torchrun argv, fixed-port detection, crashing and hanging ranks (real torchrun)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy
import pytest
from trainparity import Outcome, ToleranceComparison, check_resume, check_runs
from trainparity._internal.distributed.torchrun_argv import (
    fixed_port_problem,
    is_torchrun,
    own_port,
)
from trainparity._internal.processes.warm.pool import current_shared_servers
from trainparity.distributed import torchrun_command

from tests.few_at_a_time import beside_the_module
from tests.fixtures.distributed.cases import FixedMasterPortCase

REPO = Path(__file__).resolve().parent.parent
CASES = "tests.fixtures.distributed.cases"
RUN = [sys.executable, "-m", "torch.distributed.run"]


def _tagged(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds `marker`.

    Not the session's idle warm servers: a check gives its servers back to them when it ends
    (tests/conftest.py), and they serve the next check.
    """
    shared = current_shared_servers()
    idle = set(shared.idle_pids) if shared is not None else set()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in idle:
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in variables and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def job_environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of every check of this module: one for all, so they share a warm server.

    A variable that differs between checks (once a markers directory per test) started a
    server per check, each importing torch and torch._dynamo (which a server that forks
    torchrun's ranks preloads) again. Only the hanging rank writes a marker.
    """
    return {"OMP_NUM_THREADS": "1", "MULTIRANK_MARKERS": str(tmp_path_factory.mktemp("markers"))}


def _check(case: str | type, tmp_path: Path, environment: dict[str, str], **options):
    markers = Path(environment["MULTIRANK_MARKERS"])
    marker = f"MULTIRANK_MARKERS={markers}"
    roots = tmp_path / "roots"
    result = check_resume(
        case if isinstance(case, type) else f"{CASES}:{case}",
        cwd=REPO,
        temporary_root=roots,
        environment=environment,
        **options,
    )
    deadline = time.monotonic() + 5
    while (alive := _tagged(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return result, alive, roots, markers


def test_torchrun_command_has_a_private_loopback_rendezvous(tmp_path):
    first = torchrun_command(["train.py", "--x"], nproc_per_node=2, log_dir=tmp_path)
    second = torchrun_command(["train.py", "--x"], nproc_per_node=2, log_dir=tmp_path)
    assert first[:3] == RUN and first[-2:] == ["train.py", "--x"]
    assert "--rdzv-endpoint=127.0.0.1:0" in first and "--local-addr=127.0.0.1" in first
    assert f"--log-dir={tmp_path}" in first and "--tee=3" in first
    ids = {argument for argument in first + second if argument.startswith("--rdzv-id=")}
    assert len(ids) == 2  # every phase its own rendezvous
    assert fixed_port_problem(first, {}) is None
    with pytest.raises(TypeError, match="not one string"):
        torchrun_command("train.py", nproc_per_node=2)
    with pytest.raises(ValueError, match="at least 1"):
        torchrun_command(["train.py"], nproc_per_node=0)


@pytest.mark.parametrize(
    ("options", "environment", "port"),
    [
        (["--nproc-per-node=2"], {}, 29500),
        (["--master_port", "29611"], {}, 29611),
        ([], {"PET_MASTER_PORT": "29612"}, 29612),
        (["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29613"], {}, 29613),
        (["--rdzv-backend=c10d", "--rdzv-endpoint=localhost"], {}, 29400),
        (["--standalone", "--master-port=29614"], {}, None),
        (["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0"], {}, None),
    ],
)
def test_fixed_ports_are_read_as_torchrun_reads_them(options, environment, port):
    problem = fixed_port_problem([*RUN, *options, "train.py", "--master-port=1"], environment)
    assert (problem is None) == (port is None)
    if port is not None:
        assert f"fixed port {port}" in problem
    assert not is_torchrun([sys.executable, "train.py"])
    assert is_torchrun(["/usr/bin/torchrun", "train.py"])


@pytest.mark.parametrize(
    ("argv", "port"),
    [
        (["deepspeed", "--num_gpus", "2", "train.py"], "29500"),
        (
            ["/venv/bin/deepspeed", "--master_port", "29611", "train.py", "--master_port", "1"],
            "29611",
        ),
        (
            [sys.executable, "-m", "deepspeed.launcher.runner", "--master_port=29612", "t.py"],
            "29612",
        ),
    ],
)
def test_the_deepspeed_launcher_always_binds_a_fixed_port(argv, port):
    """Its ranks meet at --master_port (default 29500): phases run at once would collide."""
    problem = fixed_port_problem(argv, {})
    assert problem is not None and f"fixed port {port} (--master_port" in problem
    assert not is_torchrun(argv)


def test_plain_torchrun_phases_each_get_a_port_and_run_at_once(tmp_path, job_environment):
    """`torchrun --nproc-per-node 2 train.py` binds port 29500 by default: each phase gets its
    own through PET_MASTER_PORT, so concurrent phases neither collide nor are refused."""
    result, alive, roots, _markers = _check(
        "PlainTorchrunCase", tmp_path, job_environment, parallel=True
    )
    assert result.outcome is Outcome.PASS, result.message
    assert alive == []
    assert list(roots.iterdir()) == []


def _unused_port() -> int:
    """A port nothing listened on a moment ago (the kernel's choice of a free one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_master_port_the_user_wrote_runs_each_phase_alone(tmp_path, job_environment):
    """Two phases on one written port at once would collide (one fails to bind, or joins the
    other's job): a PASS shows they ran one after another.

    The port is written into the command, as a user writes it, but chosen free when the test
    starts: the case's own constant 29533 failed to bind when another run of this suite on the
    same machine held it (EADDRINUSE), a verdict that depended on what else ran.
    """
    case = type("FixedMasterPortCase", (FixedMasterPortCase,), {"master_port": _unused_port()})
    result, alive, _roots, _markers = _check(case, tmp_path, job_environment, parallel=True)
    assert result.outcome is Outcome.PASS, result.message
    assert alive == []


def test_own_port_moves_only_default_ports():
    plain = own_port([*RUN, "--nproc-per-node=2", "train.py"], {})
    assert plain.alone is None and plain.argv[-1] == "train.py"
    assert 0 < int(plain.environment["PET_MASTER_PORT"]) < 65536
    written = own_port([*RUN, "--master-port=29533", "train.py"], {})
    assert written.alone is not None and "29533" in written.alone
    launcher = own_port(["deepspeed", "--num_gpus", "2", "train.py", "--master_port", "1"], {})
    assert launcher.alone is None and launcher.argv[1].startswith("--master_port=")
    assert launcher.argv[-2:] == ["--master_port", "1"]  # the script's own option is kept
    assert own_port(["deepspeed", "--master_port=29611", "train.py"], {}).alone is not None
    assert own_port([*RUN, "--standalone", "train.py"], {}) is None


def test_crashing_rank_is_an_error_naming_phase_rank_and_its_last_stderr_line(
    tmp_path, job_environment
):
    result, alive, roots, _markers = _check(
        "CrashingRankCase", tmp_path, job_environment, timeout=240
    )
    assert result.outcome is Outcome.ERROR, result.message
    assert result.message.startswith("baseline_a child exited with status 1: rank 1 exited")
    assert "its last stderr line: RuntimeError: rank one fails here on purpose" in result.message
    (baseline_a,) = result.processes
    failed = {rank.rank: rank.returncode for rank in baseline_a.ranks}
    # Rank 0 finished (0), or torchrun stopped it: unreported (None), or reported as killed by
    # its SIGTERM (-15) when it was still running as rank 1 failed, which load decides.
    assert failed[1] == 1 and failed.get(0) in (None, 0, -signal.SIGTERM)
    assert alive == []
    assert list(roots.iterdir()) == []


_ENDING_SCRIPT = """
import sys
import torch.distributed as dist
import trainparity
from trainparity.distributed import end_rank

if sys.argv[2] == "group":
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + "/store", rank=0, world_size=1)
trainparity.record_ids([7, 8, 9], epoch=0, directory=sys.argv[1] + "/ids")  # buffered
print("written before leaving", end="")  # unflushed: end_rank flushes it
end_rank(int(sys.argv[3]))
"""


@pytest.mark.parametrize("group", ["group", "none"])
def test_end_rank_tears_down_flushes_and_exits_with_the_code(tmp_path, group):
    script = tmp_path / "job.py"
    script.write_text(_ENDING_SCRIPT)
    completed = subprocess.run(
        [sys.executable, str(script), str(tmp_path), group, "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert completed.returncode == 3, completed.stderr
    assert completed.stdout == "written before leaving"
    ids = (tmp_path / "ids" / "rank0.epoch0.ids").read_bytes()
    assert numpy.frombuffer(ids, dtype="<i8").tolist() == [7, 8, 9]


def test_check_runs_of_two_ranks_against_one_compares_rank_zero_step_by_step(
    tmp_path, job_environment
):
    result = check_runs(
        f"{CASES}:DataParallelRuns",
        comparison=ToleranceComparison(rtol=1e-5, atol=1e-6),
        cwd=REPO,
        temporary_root=tmp_path,
        environment=job_environment,
        timeout=240,
    )
    assert result.outcome is Outcome.PASS, result.message
    assert [len(process.ranks) for process in result.processes] == [1, 1, 2, 2]
    assert result.trajectory["ranks"] == [0, 1]
    steps = result.trajectory["recorded_steps"]
    assert steps["two_ranks_b"] == {"rank0": [1, 2, 3], "rank1": [1, 2, 3]}
    assert steps["one_rank_a"] == {"rank0": [1, 2, 3]}
    assert list(tmp_path.iterdir()) == []


# Last in the module: the other tests run while its check waits out its timeout.
HANGING_TEST = "test_hanging_rank_is_killed_with_the_agent_and_every_other_rank"


@pytest.fixture(scope="module", autouse=True)
def hanging_check(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The hanging-rank check, started with the module's first test and run beside the others.

    Most of it is its 30 s timeout, with nothing to compute: run alone, it held this worker
    idle. Its own markers directory tells its ranks from the other tests' (which wait for
    theirs to end), at the price of one more warm server. Not started when its test is not
    selected.
    """
    # Rank 1 ignores SIGTERM: torchrun's own shutdown cannot stop it, and it is
    # in another session than the agent, so killing the agent's group misses it. The agent and
    # ranks start warm (torch imported) and the job imports only torch.distributed: 30 s is
    # many times their set-up, and the marker proves rank 1 was asleep when the timeout hit.
    environment = {
        "OMP_NUM_THREADS": "1",
        "MULTIRANK_MARKERS": str(tmp_path_factory.mktemp("hanging-markers")),
    }
    directory = tmp_path_factory.mktemp("hanging")
    with beside_the_module(
        request, HANGING_TEST, _check, "HangingRankCase", directory, environment,
        timeout=30, parallel=False,
    ) as future:  # fmt: skip
        yield future


def test_hanging_rank_is_killed_with_the_agent_and_every_other_rank(hanging_check):
    result, alive, roots, markers = hanging_check.result()
    assert result.outcome is Outcome.ERROR
    assert result.message.splitlines()[0] == "baseline_a child exceeded timeout"
    assert len(list(markers.iterdir())) == 1  # rank 1 really was asleep when the timeout hit
    assert alive == []
    assert list(roots.iterdir()) == []
