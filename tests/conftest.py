"""Fixtures shared across test modules: the suite's start mode, one real SLURM cluster per session.

Start mode: checks fork their children warm, except where a start itself is tested, from
warm servers each worker keeps for the whole session.

A check's children each import torch (seconds of CPU apiece); in warm mode a
check imports it once (docs/limitations.md, "Warm starts"). The session runs
with TRAINPARITY_START=warm and, unless the caller set one, PYTHONHASHSEED=0
(which warm mode needs to share one server between a check's children). The
tests of the fixed fresh set below run fresh, with the caller's hash seed
setting; the modules about starting, stopping and crashing children run in
both modes, so each of their tests proves the two alike.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import temp_guard, time_budget
from tests.slurm_cluster import SlurmCluster, slurm_cluster
from tests.system_packages import require_packages

# Tests of the default (fresh) start itself: the pinned reports, the spawn and the children's
# environment, and what a fresh interpreter draws at random (hash seeds included).
FRESH_MODULES = frozenset(
    {
        "test_report_pins",
        "test_processes",
        "test_child_threads",
        "test_environment",
    }
)
# Timeouts, crashes, Ctrl-C, SIGTERM/SIGHUP and leaked grandchildren: the tests marked
# both_start_modes (all of test_termination, the process-level ones of test_resume_processes)
# run once per mode, so each proves the two alike. The rest of those modules (concurrency,
# progress events) is about the executor, not how a child starts: warm only, like the suite.
BOTH_MODES_MARKER = "both_start_modes"
# Modules whose training scripts build optimizers (or trainers that do): their warm servers
# also import torch._dynamo (TRAINPARITY_WARM_PRELOAD), which each phase would import itself
# (about 0.8 s of CPU per phase, against 2.5 s once per server). Elsewhere a server without
# it is ready sooner. To find a module that belongs here: count its warm children that
# imported torch._dynamo themselves ("torch._dynamo" in sys.modules at exit, not in the
# server's); the last ten entries came from that count (2026-12-07: 4 to 25 such phases each).
PRELOAD_DYNAMO_MODULES = frozenset(
    {
        "test_resume_faults",
        "test_noise_checks",
        "test_explain",
        "test_resume_trajectories",
        "test_resume_chain",
        "test_resume_guide",
        "test_resume_coverage_steps",
        "test_forensics",
        "test_fsdp2_guide",
        "test_huggingface",
        "test_lightning",
        "test_accelerate",
        "test_two_rank_trainers",
        "test_id_columns",
        "test_crash_check",
        "test_crash_faults",
        "test_crash_trainers",
        "test_command_case_self_resume",
        "test_fsdp2_two_d_guide",
        "test_fsdp2_layout_change",
        "test_scheduler_capture",
        "test_likely_cause",
        "test_check_runs",
        "test_reuse_baselines",
        "test_verdict_corpus",
        "test_explain_claims",
        "test_explain_case_arguments",
    }
)
_PRELOAD_VARIABLE = "TRAINPARITY_WARM_PRELOAD"
# `pytestmark = pytest.mark.warm_preload("deepspeed", ...)`: a module whose scripts import an
# installed library's heavy modules has its servers import them too (after torch._dynamo
# where the module is listed above), as a user's suite would name them. Seconds of CPU per
# phase or rank otherwise: transformers.trainer 1.7 s, lightning 1.1 s, torch._inductor's
# compile_fx 0.9 s (DeepSpeed's Muon optimizer module imports it on every rank).
WARM_PRELOAD_MARKER = "warm_preload"


# "1" when the hash seed is the suite's (set below) rather than the caller's own. A variable,
# not a module global: pytest-xdist's workers start after the controller's pytest_configure
# and would otherwise take the suite's seed for the caller's.
_OWN_HASH_SEED = "TRAINPARITY_SUITE_OWN_HASH_SEED"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fresh_start: run this test's checks in fresh mode (a new interpreter per child)"
    )
    config.addinivalue_line(
        "markers", f"{BOTH_MODES_MARKER}: run this test twice, its checks fresh and then warm"
    )
    config.addinivalue_line(
        "markers",
        f"{WARM_PRELOAD_MARKER}(*modules): installed libraries' modules the warm servers of "
        "this test's checks import too (TRAINPARITY_WARM_PRELOAD)",
    )
    # The session's default, so that checks run by module- and session-scoped fixtures
    # (which start before any test's own fixtures) are warm too.
    os.environ.setdefault("TRAINPARITY_START", "warm")
    if "PYTHONHASHSEED" not in os.environ:
        os.environ["PYTHONHASHSEED"] = "0"
        os.environ[_OWN_HASH_SEED] = "1"
    temp_guard.start(config)
    time_budget.register(config)  # on where TRAINPARITY_TEST_BUDGET_SECONDS is set (CI)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    temp_guard.finish(session, exitstatus)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Collects with the cyclic collector paused, then freezes what collection left alive.

    Collecting imports some 4,400 modules (torch, every test module and what they import):
    about 500,000 objects that live as long as the worker. Each full pass of the collector
    walks all of them (0.2 to 0.4 s of CPU once the heap has grown), and a worker made some
    20 such passes while collecting and then more while tests ran, set off by what checks
    allocate (recordings, snapshot trees), not by those modules. Frozen, they are left out
    of every later pass; tests' own objects are collected as before.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()  # what collection left unreachable is freed, not frozen
        gc.freeze()
        if enabled:
            gc.enable()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    temp_guard.summary(terminalreporter, config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A hook, not a fixture: module-scoped fixtures (which run whole checks) start before any
    # function-scoped fixture of the module's first test, but after this.
    module = _module_name(getattr(item, "module", None))
    preloads = ["torch._dynamo"] if module in PRELOAD_DYNAMO_MODULES else []
    marker = item.get_closest_marker(WARM_PRELOAD_MARKER)
    if marker is not None:
        preloads += [name for name in marker.args if name not in preloads]
    if preloads:
        os.environ[_PRELOAD_VARIABLE] = ",".join(preloads)
    else:
        os.environ.pop(_PRELOAD_VARIABLE, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker(BOTH_MODES_MARKER) is not None:
        metafunc.parametrize("start_mode", ["fresh", "warm"], indirect=True)


@pytest.fixture(scope="session", autouse=True)
def _shared_warm_servers() -> Iterator[object]:
    """Warm checks of this worker keep their servers for the next one (docs/pytest.md).

    Each server imports torch (and torch._dynamo where preloaded): 2 to 3 s of CPU that
    every warm check paid before its first child. Session-scoped, so that the checks of
    module- and session-scoped fixtures share them too; they stop when the session ends,
    before the temporary-root guard looks for leftovers. What the plugin's
    trainparity_shared_warm_servers does, without the plugin: the sanitized C core's run
    (`make sanitize`) loads this file with `-p no:trainparity`.
    """
    from trainparity._internal.processes.warm.pool import shared_warm_servers

    # 8 idle servers, not the default 4: a worker moves through modules whose checks use
    # many environments (and preloads), and in a suite 4 evicted about 20 servers that a later
    # module started again. Each idle one holds 0.15 to 0.25 GiB. Not more: 16 saved 6 server
    # starts of about 100, and the servers idle at the end are reaped in this fixture's
    # teardown, whose CPU then counts their imports (70.1 s with 16, past the budget).
    with shared_warm_servers(max_idle=8) as servers:
        yield servers


@pytest.fixture(autouse=True)
def start_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The start mode of this test's checks (TRAINPARITY_START, which a check without start= takes)."""
    mode = getattr(request, "param", None)
    if mode is None:
        fresh = (
            _module_name(request.module) in FRESH_MODULES
            or request.node.get_closest_marker("fresh_start") is not None
        )
        mode = "fresh" if fresh else "warm"
    monkeypatch.setenv("TRAINPARITY_START", mode)
    if mode == "fresh" and os.environ.get(_OWN_HASH_SEED) == "1":
        monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # children draw theirs, as ever
    return mode


@pytest.fixture(autouse=True)
def _no_id_writer_outlives_its_test() -> Iterator[None]:
    """record_ids keeps a process's writers open until exit; the suite's process ends none.

    A writer left open by one test (docs/coverage.md's guide records several ranks in one
    process) would take the step marks of every later record() call in this process.
    """
    yield
    record_ids = sys.modules.get("trainparity._internal.recording.record_ids")
    if record_ids is not None:
        record_ids._close_all()


@pytest.fixture(scope="module", autouse=True)
def _no_zombie_outlives_its_module() -> Iterator[None]:
    """Warns, naming the module, of a child this worker has not reaped when the module ends.

    A zombie child of the worker would be blamed on a later module that counts its own
    (tests/test_processes.py). It is not reaped here: it may be a Popen's or a
    multiprocessing worker's that is reaped later by its owner.
    """
    earlier = set(_zombie_children())
    yield
    for pid, name in sorted(_zombie_children().items()):
        if pid not in earlier:
            warnings.warn(f"this module left an unreaped child: pid {pid} ({name})", stacklevel=1)


def _zombie_children() -> dict[int, str]:
    """This process's children that have exited and were not reaped: pid to command name."""
    me = str(os.getpid())
    zombies = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path("/proc", entry, "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            state, parent = text[text.rindex(")") + 2 :].split()[:2]
            if state == "Z" and parent == me:
                zombies[int(entry)] = text[text.index("(") + 1 : text.rindex(")")]
    return zombies


def _module_name(module: object) -> str:
    return getattr(module, "__name__", "").rpartition(".")[2]


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[SlurmCluster]:
    """Started on first use, stopped (every job cancelled, directory removed) at session end.

    Skips where SLURM is not installed (fails under CI=true): tests/system_packages.py."""
    require_packages("slurm-wlm", "munge")
    with slurm_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_session: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """The session's cluster, its clients' variables (SLURM_CONF, PATH) set for this test."""
    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, slurm_session.environment[key])
    return slurm_session
