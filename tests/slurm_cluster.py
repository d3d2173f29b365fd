"""A real single-node SLURM cluster for the tests: munged, slurmctld and slurmd, every file in one directory.

Debian's slurm-wlm and munge packages (installed by .ci/run). The daemons
run in the foreground as our children, on free ports, with `SLURM_CONF`
pointing at a slurm.conf in a temporary directory, so nothing under /etc,
/run or /var is used and two clusters can run side by side. No accounting
database: `sacct` is answered from slurmctld's memory by a small script put
first on PATH, because submitit polls `sacct` for job states and would never
see a cancelled or timed-out job end without it. Missing packages are a
failure, not a skip: CI must test against a real SLURM.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_DAEMONS = ("munged", "slurmctld", "slurmd")
_START_TIMEOUT_SECONDS = 30.0
_STOP_TIMEOUT_SECONDS = 15.0
_CPUS = 8

# `sacct -o JobID,State,NodeList --parsable2 -j ID ...` as submitit calls it, from squeue.
_SACCT = """#!/bin/sh
ids=""
while [ $# -gt 0 ]; do
  case "$1" in
    -j|--jobs) ids="$ids${ids:+,}$2"; shift 2 ;;
    --jobs=*) ids="$ids${ids:+,}${1#--jobs=}"; shift ;;
    *) shift ;;
  esac
done
echo "JobID|State|NodeList"
[ -n "$ids" ] && squeue -h --states=all -j "$ids" -o '%i|%T|%N' 2>/dev/null
exit 0
"""


@dataclass(frozen=True)
class SlurmCluster:
    """A running cluster: the environment its clients need, and the seconds it took to start."""

    directory: Path
    environment: dict[str, str]
    start_seconds: float


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _configuration(root: Path) -> str:
    hardware = subprocess.run(
        ["slurmd", "-C"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.splitlines()[0]
    # RealMemory as slurmd detects it (more would make the node invalid). Eight CPUs whatever
    # the machine has (config_overrides trusts the file): a check's concurrent phases run as
    # concurrent jobs, as the local check runs them concurrently on the same cores.
    memory = next(field for field in hardware.split() if field.startswith("RealMemory="))
    node = (
        f"CPUs={_CPUS} Boards=1 SocketsPerBoard=1 CoresPerSocket={_CPUS} ThreadsPerCore=1 {memory}"
    )
    controller_port = _free_port()
    node_port = _free_port()
    while node_port == controller_port:
        node_port = _free_port()
    return f"""ClusterName=trainparity-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={node_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
PlugStackConfig={root}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=localhost NodeAddr=127.0.0.1 {node} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def _prepare(root: Path) -> dict[str, str]:
    # munged refuses a socket directory that is not a+x, and a key others can read.
    root.chmod(0o755)
    for name in ("munge", "state", "spool", "log", "bin"):
        (root / name).mkdir()
    (root / "munge").chmod(0o755)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    (root / "plugstack.conf").write_text("", encoding="utf-8")
    (root / "slurm.conf").write_text(_configuration(root), encoding="utf-8")
    sacct = root / "bin" / "sacct"
    sacct.write_text(_SACCT, encoding="utf-8")
    sacct.chmod(sacct.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {
        **os.environ,
        "SLURM_CONF": str(root / "slurm.conf"),
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _daemon_argv(root: Path) -> list[list[str]]:
    munge = root / "munge"
    return [
        [
            "munged",
            "--foreground",
            f"--key-file={munge / 'munge.key'}",
            f"--socket={munge / 'munge.sock'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={root / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
        ["slurmctld", "-D", "-f", str(root / "slurm.conf")],
        ["slurmd", "-D", "-f", str(root / "slurm.conf"), "-N", "localhost"],
    ]


def _wait_until(condition, what: str, root: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
                for log in sorted((root / "log").glob("*.log"))
            )
            raise RuntimeError(f"the test SLURM cluster did not start: {what}\n{logs}")
        time.sleep(0.05)


def _node_idle(environment: dict[str, str]) -> bool:
    answer = subprocess.run(
        ["sinfo", "-h", "-n", "localhost", "-o", "%T"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=10,
    )
    return answer.stdout.strip() == "idle"


@contextlib.contextmanager
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Start the cluster, yield it, then cancel every job, stop the daemons and remove the directory."""
    missing = [daemon for daemon in (*_DAEMONS, "sbatch", "squeue") if shutil.which(daemon) is None]
    if missing:
        raise RuntimeError(
            f"SLURM is not installed ({', '.join(missing)} missing): "
            "apt-get install slurm-wlm munge (what .ci/system-packages.sh does)"
        )
    began = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="trainparity-slurm-"))
    daemons: list[subprocess.Popen] = []
    environment = _prepare(root)
    try:
        for argv in _daemon_argv(root):
            daemons.append(
                subprocess.Popen(
                    argv,
                    env=environment,
                    cwd=root / "log",
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,  # each daemon logs to its file under log/
                )
            )
            if argv[0] == "munged":
                _wait_until((root / "munge" / "munge.sock").exists, "munged's socket", root)
        _wait_until(lambda: _node_idle(environment), "the node never became idle", root)
        yield SlurmCluster(root, environment, time.perf_counter() - began)
    finally:
        if daemons:
            subprocess.run(
                ["scancel", "--user", pwd.getpwuid(os.getuid()).pw_name],
                env=environment,
                capture_output=True,
                timeout=30,
                check=False,
            )
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(_STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(_STOP_TIMEOUT_SECONDS)
        shutil.rmtree(root, ignore_errors=True)
