"""The node launcher: one torchrun agent per node of a multi-node phase, on one c10d rendezvous.

`torchrun_command(script, nproc_per_node=1, nnodes=2)` gives
`python -m trainparity._internal.distributed.nodes --nnodes 2 -- python -m torch.distributed.run ...`.
This program picks the rendezvous port (a free loopback port) and starts one
agent per node, each with its `--node-rank`, its own log directory
(`<log-dir>/node<i>`) and `TRAINPARITY_NODE=<i>` in its environment; node 0
hosts the rendezvous store (`is_host`). Here every node is a process on this
machine, which is how a single host stands in for several nodes (tests, a
laptop); the agents find each other over loopback.

It waits for every agent. When one exits with a non-zero status, the line
`trainparity: node I of N (torchrun agent pid P) exited with status S`
goes to stderr, the other agents get SIGTERM (SIGKILL after a grace
period), and the launcher exits with that status, so the phase's ERROR names
the node. Each agent's exit status, time and resources (wait4) are written
as JSON to the file `TRAINPARITY_NODES_FILE` names, which the check reads
into the phase's `processes` row (`nodes`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["NODE_VARIABLE", "NODES_FILE_VARIABLE", "main"]

NODE_VARIABLE = "TRAINPARITY_NODE"
NODES_FILE_VARIABLE = "TRAINPARITY_NODES_FILE"
_RUN_MODULE = "torch.distributed.run"
_GRACE_SECONDS = 10.0
_POLL_SECONDS = 0.05


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def agent_argv(torchrun: list[str], node: int, port: int) -> list[str]:
    """Node `node`'s torchrun argv: the shared endpoint, its rank, host or not, its log dir."""
    argv = []
    for item in torchrun:
        if item.startswith("--log-dir="):
            item = f"{item}/node{node}"
        argv.append(item)
    # After `-m torch.distributed.run`: before the script, and before nothing that overrides them.
    module_at = argv.index(_RUN_MODULE) + 1
    options = [
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--node-rank={node}",
        f"--rdzv-conf=is_host={1 if node == 0 else 0}",
    ]
    return [*argv[:module_at], *options, *argv[module_at:]]


def _spawn(argv: list[str], node: int) -> int:
    environment = {**os.environ, NODE_VARIABLE: str(node)}
    return os.posix_spawnp(argv[0], argv, environment)


def _stop(pids: dict[int, int]) -> None:
    """SIGTERM every agent still running, SIGKILL after the grace period; reap them."""
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_SECONDS
    while pids and time.monotonic() < deadline:
        for pid in list(pids):
            if os.waitpid(pid, os.WNOHANG)[0]:
                del pids[pid]
        time.sleep(_POLL_SECONDS)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def run(nnodes: int, torchrun: list[str]) -> int:
    port = _free_port()
    started = time.monotonic()
    running = {_spawn(agent_argv(torchrun, node, port), node): node for node in range(nnodes)}
    rows: list[dict[str, Any]] = []
    status = 0
    try:
        while running and status == 0:
            pid, wait_status, usage = os.wait4(-1, 0)
            if pid not in running:
                continue
            node = running.pop(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            rows.append(
                {
                    "node": node,
                    "pid": pid,
                    "returncode": code,
                    "elapsed_seconds": time.monotonic() - started,
                    "user_seconds": usage.ru_utime,
                    "system_seconds": usage.ru_stime,
                    "peak_rss_bytes": usage.ru_maxrss * 1024,
                }
            )
            if code != 0:
                print(
                    f"trainparity: node {node} of {nnodes} (torchrun agent pid {pid}) exited "
                    f"with status {code}",
                    file=sys.stderr,
                    flush=True,
                )
                status = code if code > 0 else 128 - code
    finally:
        _stop(running)
        _write_rows(sorted(rows, key=lambda row: row["node"]))
    return status


def _write_rows(rows: list[dict[str, Any]]) -> None:
    target = os.environ.get(NODES_FILE_VARIABLE)
    if target:
        temporary = f"{target}.tmp"
        Path(temporary).write_text(json.dumps(rows, sort_keys=True), encoding="utf-8")
        os.replace(temporary, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainparity._internal.distributed.nodes",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--nnodes", type=int, required=True)
    parser.add_argument("torchrun", nargs=argparse.REMAINDER, help="after --: the torchrun argv")
    arguments = parser.parse_args(argv)
    torchrun = arguments.torchrun[1:] if arguments.torchrun[:1] == ["--"] else arguments.torchrun
    if arguments.nnodes < 2 or not torchrun:
        parser.error("give --nnodes N (at least 2) and the torchrun command after --")
    return run(arguments.nnodes, torchrun)


if __name__ == "__main__":
    sys.exit(main())
