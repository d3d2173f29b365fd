"""The parent's side of several ranks in check_accumulation: each rank's child, and where ranks disagree.

The candidate of a multi-rank plan runs as one child per rank
(`candidate.rank<r>`, in `candidate/rank<r>/`) with an env rendezvous on
127.0.0.1 and a free port; accumulation/ranks.py is what runs in each.
After they ran, `rank_differences` checks that the ranks agree with each
other (one gradient synchronisation per update, equal parameters) before
rank 0 is compared with the one-process reference. Torch-free: the check's
own process imports no torch for this.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainparity._internal.accumulation.plan import RANKS_KEY
from trainparity._internal.accumulation.sharded import unsharded
from trainparity._internal.comparison.policies import Difference
from trainparity._internal.processes.group import ChildSpec

__all__ = ["rank_differences", "rank_names", "rank_specs"]


def rank_names(name: str, world_size: int) -> list[str]:
    return [f"{name}.rank{rank}" for rank in range(world_size)]


def rank_specs(
    name: str,
    argv: list[str],
    *,
    cwd: Path,
    environment: Mapping[str, str],
    directory: Path,
    world_size: int,
) -> list[ChildSpec]:
    """One ChildSpec per rank: argv with this rank's result/observation files, env rendezvous."""
    port = _free_port()
    specs = []
    for rank, child in enumerate(rank_names(name, world_size)):
        rank_directory = directory / f"rank{rank}"
        rank_directory.mkdir(parents=True, exist_ok=True)
        for stale in ("result.json", "observations.safetensors"):
            (rank_directory / stale).unlink(missing_ok=True)
        rank_argv = [
            str(rank_directory / Path(argument).name)
            if index and argv[index - 1] in ("--result", "--observations")
            else argument
            for index, argument in enumerate(argv)
        ]
        env = {
            **environment,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
        }
        specs.append(
            ChildSpec(
                name=child,
                argv=rank_argv,
                cwd=cwd,
                env=env,
                stdout_path=rank_directory / "stdout.log",
                stderr_path=rank_directory / "stderr.log",
            )
        )
    return specs


def _free_port() -> int:
    # The port is free now; the ranks bind it a moment later. Rank 0 is the only
    # binder, so a collision needs another program to take the port in between.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rank_differences(
    policy: Any, views: list[Mapping[str, Any]]
) -> tuple[str, tuple[Difference, ...]] | None:
    """The first disagreement among the ranks' own observations: (message, differences), or None.

    First every rank's gradient synchronisations (one per optimizer update;
    a count is missing where the case's own DDP kept its own comm hook), then
    each rank's parameters and buffers against rank 0's: those every rank
    holds whole (a rank's shard of an FSDP2 parameter is its own).
    """
    for rank, view in enumerate(views):
        syncs = view[RANKS_KEY].state.as_dict().get("gradient_syncs")
        if syncs is not None and syncs != 1:
            difference = Difference("ranks.gradient_syncs", "value", "1", str(syncs))
            return (
                f"first observed divergence in ranks: rank {rank} synchronised gradients "
                f"{syncs} times in one update; not a root-cause claim",
                (difference,),
            )
    for rank, view in enumerate(views[1:], start=1):
        differences = policy.compare_all(
            unsharded(views[0]["parameter_update"]), unsharded(view["parameter_update"])
        )
        if differences:
            renamed = tuple(
                replace(difference, path=_rank_path(difference.path)) for difference in differences
            )
            return (
                f"first observed divergence in ranks: rank 0 and rank {rank} hold different "
                "parameters after the update; not a root-cause claim",
                renamed,
            )
    return None


def _rank_path(path: str) -> str:
    for prefix, replacement in (("model", "ranks.parameters"), ("buffer", "ranks.buffers")):
        if path == prefix or path.startswith((prefix + ".", prefix + "[")):
            return replacement + path[len(prefix) :]
    return f"ranks.{path}"
