"""Fixtures shared across test modules: one real SLURM cluster per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm_cluster import SlurmCluster, slurm_cluster


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[SlurmCluster]:
    """Started on first use, stopped (every job cancelled, directory removed) at session end."""
    with slurm_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_session: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """The session's cluster, its clients' variables (SLURM_CONF, PATH) set for this test."""
    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, slurm_session.environment[key])
    return slurm_session
