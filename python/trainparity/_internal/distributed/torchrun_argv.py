"""torchrun command lines for resume phases: a private rendezvous per phase, logs inside its run dir.

`torchrun_command` builds the argv of one phase. Its rendezvous store and the
workers' bootstrap store listen on ports the kernel assigns at bind time
(endpoint `127.0.0.1:0`), on loopback only, so any number of phases and other
jobs can run at once without sharing or racing for a port. `--log-dir` puts
torchrun's per-rank logs (and the directory it would otherwise create with
`mkdtemp` under /tmp and never remove) inside the phase's own directory.

`fixed_port_problem` reads a user's own torchrun argv with torchrun's own
parser and says when it would bind a fixed port (static rendezvous on
`--master-port`, default 29500, or a `--rdzv-endpoint` with a port): two such
phases running concurrently would collide on it. The `deepspeed` launcher
always binds one (`--master_port`, default 29500). `own_port` gives such a
phase a port of its own where the port is only a default (torchrun reads
`PET_MASTER_PORT` when `--master-port` is not given; the DeepSpeed launcher
takes `--master_port`); a port the user wrote cannot be moved, and the phase
then runs alone.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "NODES_MODULE",
    "SCRIPT_FORM_MODULES",
    "PortRemedy",
    "forked_launcher",
    "fixed_port_problem",
    "is_torchrun",
    "local_ranks",
    "own_port",
    "torchrun_command",
]

_RUN_MODULE = "torch.distributed.run"
NODES_MODULE = "trainparity._internal.distributed.nodes"  # one torchrun agent per node (nodes.py)
_DEFAULT_MASTER_PORT = 29500  # torchrun's default for the static rendezvous
_DEFAULT_RDZV_PORT = 29400  # torch.distributed.elastic's default for a c10d endpoint without port
_DEEPSPEED_RUNNER = "deepspeed.launcher.runner"  # what the `deepspeed` command runs
_DEEPSPEED_LAUNCH = "deepspeed.launcher.launch"  # the per-node launch.py the runner starts
SCRIPT_FORM_MODULES = frozenset({_DEEPSPEED_RUNNER})
"""Modules whose console script beside the interpreter (`bin/deepspeed`) a warm start forks
as the script itself, `python …/bin/deepspeed …`: the command the kernel makes of its shebang."""


def torchrun_command(
    script: Sequence[str],
    *,
    nproc_per_node: int,
    log_dir: str | os.PathLike[str] | None = None,
    python: str | None = None,
    torchrun_options: Sequence[str] = (),
    nnodes: int = 1,
) -> list[str]:
    """The argv that runs `script` (a script path and its arguments) on `nproc_per_node` local ranks.

    `python` defaults to this interpreter. `log_dir` (give the phase's
    `plan.run_dir / "ranks"`) receives every rank's stdout/stderr and error
    file (torchrun `--redirects=3 --tee=3`: also echoed, prefixed `[rankN]:`,
    on torchrun's own output), which the check uses to name the rank that
    failed. Without `log_dir` torchrun creates a directory under the
    temporary root and never removes it. `torchrun_options` are added before
    the script (e.g. `["--module"]` to run `script[0]` as a module).

    `nnodes` > 1 spans the phase over that many nodes, one torchrun agent each
    on one c10d rendezvous: the argv then starts the node launcher
    (`python -m trainparity._internal.distributed.nodes`, distributed/nodes.py), which
    picks the rendezvous port and starts the agents, here on this machine.
    """
    if isinstance(nproc_per_node, bool) or not isinstance(nproc_per_node, int):
        raise TypeError(f"nproc_per_node must be an int, not {nproc_per_node!r}")
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be at least 1, not {nproc_per_node}")
    if isinstance(nnodes, bool) or not isinstance(nnodes, int) or nnodes < 1:
        raise ValueError(f"nnodes must be a positive int, not {nnodes!r}")
    if isinstance(script, (str, bytes)) or not script:
        raise TypeError(
            "script must be a non-empty sequence such as ['train.py', '--steps', '4'], not one string"
        )
    interpreter = python or sys.executable
    argv = [
        interpreter,
        "-m",
        _RUN_MODULE,
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        # One node: a port the kernel assigns. Several: the node launcher's port.
        *(["--rdzv-endpoint=127.0.0.1:0"] if nnodes == 1 else []),
        f"--rdzv-id={uuid.uuid4().hex}",
        "--local-addr=127.0.0.1",
        "--max-restarts=0",
    ]
    if log_dir is not None:
        argv += [f"--log-dir={Path(log_dir)}", "--redirects=3", "--tee=3"]
    argv = [*argv, *torchrun_options, *map(str, script)]
    if nnodes == 1:
        return argv
    return [interpreter, "-m", NODES_MODULE, "--nnodes", str(nnodes), "--", *argv]


def is_torchrun(argv: Sequence[str]) -> bool:
    """Whether argv launches torchrun: `torchrun …`, `python -m torch.distributed.run …`, or
    the node launcher of a multi-node phase (which starts such agents)."""
    if not argv:
        return False
    if Path(argv[0]).name == "torchrun":
        return True
    return any(
        argv[index] == "-m" and argv[index + 1] in (_RUN_MODULE, NODES_MODULE)
        for index in range(len(argv) - 1)
    )


def forked_launcher(argv: Sequence[str]) -> dict[str, Any] | None:
    """What a launcher forked warm as `argv` (this interpreter first) may fork from a zygote
    of its own (processes/warm/rank_zygote.py), or None for any other command.

    DeepSpeed's runner (`python …/bin/deepspeed …`, `python -m deepspeed.launcher.runner …`)
    starts its single node's `python -u -m deepspeed.launcher.launch …` with the runner's own
    environment, less CUDA_VISIBLE_DEVICES, which it drops when its options choose the
    accelerators; launch.py starts each rank with its environment plus torchrun's per-rank
    names and CROSS_RANK, CROSS_SIZE, LOCAL_SIZE and CUDA_VISIBLE_DEVICES (none read by
    importing torch or DeepSpeed). The server also imports the runner's module, which the
    runner, launch.py and every rank import.
    """
    runs_runner = list(argv[1:3]) == ["-m", _DEEPSPEED_RUNNER] or (
        len(argv) >= 2 and Path(argv[1]).name == "deepspeed"
    )
    if not runs_runner:
        return None
    return {
        "launch_module": _DEEPSPEED_LAUNCH,
        "launch_may_drop": ["CUDA_VISIBLE_DEVICES"],
        "rank_variables": ["CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE", "CUDA_VISIBLE_DEVICES"],
        "preload": _DEEPSPEED_RUNNER,
    }


def is_deepspeed_launcher(argv: Sequence[str]) -> bool:
    """Whether argv starts DeepSpeed's launcher: `deepspeed …` or `python -m deepspeed.launcher.runner …`."""
    if not argv:
        return False
    if Path(argv[0]).name == "deepspeed":
        return True
    return any(
        argv[index] == "-m" and argv[index + 1] == _DEEPSPEED_RUNNER
        for index in range(len(argv) - 1)
    )


def _deepspeed_master_port(argv: Sequence[str]) -> str:
    """The launcher's --master_port (before the script: the script's own options are not its)."""
    for index, word in enumerate(argv):
        if word.endswith(".py"):
            break
        if word == "--master_port" and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith("--master_port="):
            return word.split("=", 1)[1]
    return str(_DEFAULT_MASTER_PORT)


def nodes_on_this_host(argv: Sequence[str]) -> int:
    """How many torchrun agents argv starts here: the node launcher's --nnodes, else 1."""
    if NODES_MODULE in argv and "--nnodes" in argv:
        return int(argv[argv.index("--nnodes") + 1])
    return 1


def _torchrun_arguments(argv: Sequence[str]) -> list[str]:
    if Path(argv[0]).name == "torchrun":
        return list(argv[1:])
    index = next(i for i in range(len(argv) - 1) if argv[i] == "-m" and argv[i + 1] == _RUN_MODULE)
    return list(argv[index + 2 :])


def _parsed_torchrun_arguments(argv: Sequence[str], environment: Mapping[str, str]) -> Any:
    """torchrun's own parse of argv (its `PET_*` defaults from `environment`), or None if it refuses."""
    from torch.distributed.run import get_args_parser

    saved = {key: os.environ.get(key) for key in environment if key.startswith("PET_")}
    saved.update({key: os.environ.get(key) for key in os.environ if key.startswith("PET_")})
    try:  # torchrun reads PET_* defaults from os.environ while parsing
        for key in saved:
            os.environ.pop(key, None)
        os.environ.update({k: v for k, v in environment.items() if k.startswith("PET_")})
        try:
            return get_args_parser().parse_args(_torchrun_arguments(argv))
        except SystemExit:
            return None  # torchrun itself will reject the command and the phase will say so
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def local_ranks(argv: Sequence[str], environment: Mapping[str, str]) -> int:
    """How many ranks argv starts on this machine: torchrun's --nproc-per-node, else 1."""
    if not is_torchrun(argv):
        return 1
    arguments = _parsed_torchrun_arguments(argv, environment)
    if arguments is None:
        return 1
    from torch.distributed.run import determine_local_world_size

    try:  # "auto", "cpu", "gpu" or a number, resolved as torchrun resolves it
        per_agent = max(1, determine_local_world_size(str(arguments.nproc_per_node)))
        return per_agent * nodes_on_this_host(argv)
    except ValueError:
        return 1  # torchrun will refuse it and the phase will say so


def fixed_port_problem(argv: Sequence[str], environment: Mapping[str, str]) -> str | None:
    """Why concurrent copies of this torchrun argv would collide on a port, or None.

    Parsed by torchrun's own argument parser (so every spelling and the
    `PET_*` environment defaults count as torchrun counts them).
    """
    if is_deepspeed_launcher(argv):
        port = _deepspeed_master_port(argv)
        return (
            f"the deepspeed launcher's ranks meet at the fixed port {port} (--master_port, "
            f"default {_DEFAULT_MASTER_PORT})"
        )
    if not is_torchrun(argv) or nodes_on_this_host(argv) > 1:  # the node launcher's free port
        return None
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    arguments = _parsed_torchrun_arguments(argv, environment)
    if arguments is None:
        return None
    if arguments.standalone:
        return None
    if arguments.rdzv_backend == "static":
        port = arguments.master_port if arguments.master_port is not None else _DEFAULT_MASTER_PORT
        return (
            f"torchrun's static rendezvous binds the fixed port {port} (--master-port, default "
            f"{_DEFAULT_MASTER_PORT})"
        )
    _host, port = parse_rendezvous_endpoint(arguments.rdzv_endpoint, _DEFAULT_RDZV_PORT)
    if port != 0:
        return f"torchrun's rendezvous endpoint binds the fixed port {port} (--rdzv-endpoint)"
    return None


@dataclass(frozen=True)
class PortRemedy:
    """How a phase whose launcher binds a fixed port still runs beside the others.

    `argv` and `environment` (variables to add) give it a free port of its own;
    `alone` is set instead when the port is the user's own: the phase then
    waits for the others and runs by itself. `note` says which, for the log.
    """

    argv: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    alone: str | None = None
    note: str = ""


def own_port(argv: Sequence[str], environment: Mapping[str, str]) -> PortRemedy | None:
    """None when argv binds no fixed port; else how to run it beside other phases."""
    problem = fixed_port_problem(argv, environment)
    if problem is None:
        return None
    if is_deepspeed_launcher(argv):
        if _deepspeed_port_given(argv):
            return PortRemedy(list(argv), alone=problem, note=f"{problem}: runs alone")
        port = str(free_port())
        start = 1 if Path(argv[0]).name == "deepspeed" else argv.index(_DEEPSPEED_RUNNER) + 1
        moved = [*argv[:start], f"--master_port={port}", *argv[start:]]
        return PortRemedy(moved, note=f"the deepspeed launcher's ranks meet at port {port}")
    port = str(free_port())
    arguments = _parsed_torchrun_arguments(argv, {**environment, "PET_MASTER_PORT": port})
    if (
        arguments is not None
        and arguments.rdzv_backend == "static"
        and "PET_MASTER_PORT" not in environment
        and str(arguments.master_port) == port
    ):
        return PortRemedy(
            list(argv),
            {"PET_MASTER_PORT": port},
            note=f"torchrun's static rendezvous binds port {port} (PET_MASTER_PORT)",
        )
    return PortRemedy(list(argv), alone=problem, note=f"{problem}: runs alone")


def free_port() -> int:
    """A loopback TCP port the kernel has just handed out (and taken back) for this phase."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _deepspeed_port_given(argv: Sequence[str]) -> bool:
    for word in argv:
        if word.endswith(".py"):
            return False
        if word == "--master_port" or word.startswith("--master_port="):
            return True
    return False
