"""Warm servers kept between the checks of one process: `shared_warm_servers()`.

A warm check starts a server per environment of its children, and each
server imports torch (2 to 3 s of CPU here, more with torch._dynamo) before
it forks anything; by default the check stops its servers when it ends. A
suite or notebook that runs many warm checks pays that import once per
check. Inside `with shared_warm_servers():` a warm check borrows an idle
server of the same environment and preloads when there is one, and gives
back the servers it used when it ends, for the next check. A server serves
one check at a time (a borrowed one is the check's alone), so checks in
several threads each start or borrow their own.

What a child sees does not change: a server is as pristine after forking
children as before (a fork leaves its parent as it was), and the key a
server is found by (its environment, its preloads) is the one a check uses
to choose among its own servers. A server seeded for one phase alone
(no PYTHONHASHSEED: starter.py) is never kept.

Shared servers are started from a thread of the pool's own, which lives as
long as the pool: a server's parent-death signal fires when the thread that
started it ends, and a check may run in a thread that ends before the next
check (a ThreadPoolExecutor's), which would kill the servers it gave back.

This module knows servers only as objects with `pid`, `alive()` and
`close()` (server_handle.py's WarmServer): starter.py makes them and imports
this module, never the reverse.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

__all__ = ["ServerThread", "SharedWarmServers", "current_shared_servers", "shared_warm_servers"]

DEFAULT_MAX_IDLE = 4
"""Idle servers kept at most (each holds its imports' memory: about 0.2 GiB with torch._dynamo)."""


_T = TypeVar("_T")


class _Server(Protocol):
    pid: int

    def alive(self) -> bool: ...

    def close(self) -> None: ...


class SharedWarmServers:
    """The idle warm servers of this process, by key; see the module's docstring.

    `max_idle` bounds the servers kept while no check uses them: past it, the
    one idle longest stops first. (Not the one that served the fewest checks:
    servers of an earlier test module, each having served dozens, then kept
    every later module's servers out; a test suite moves from environment to
    environment, and the recently used is what comes next.)
    """

    def __init__(self, max_idle: int = DEFAULT_MAX_IDLE) -> None:
        if isinstance(max_idle, bool) or not isinstance(max_idle, int) or max_idle < 1:
            raise ValueError(f"max_idle must be a whole number of servers >= 1, not {max_idle!r}")
        self.max_idle = max_idle
        self._lock = threading.Lock()
        # Idle servers in the order they were given back, idle longest first: (key, server).
        self._idle: list[tuple[Hashable, _Server]] = []
        self._directory: Path | None = None
        self._started = 0
        self._closed = False
        self._thread = ServerThread("trainparity-warm-servers")

    @property
    def idle_pids(self) -> tuple[int, ...]:
        """The pids of the servers kept idle now (none of them is running a check's children)."""
        with self._lock:
            return tuple(server.pid for _, server in self._idle)

    def take(self, key: Hashable) -> _Server | None:
        """An idle server of `key`, now the caller's until it gives it back; None if there is none."""
        while True:
            with self._lock:
                found = next((entry for entry in self._idle if entry[0] == key), None)
                if found is None:
                    return None
                self._idle.remove(found)
            _, server = found
            if server.alive():
                return server
            server.close()  # it died while idle (killed, or its thread's parent-death signal)

    def server_directory(self) -> tuple[Path, int] | None:
        """Where a new server of this pool keeps its logs (and works), and its number there.

        None once closed (another thread left the block while a check ran): the check
        then starts a server of its own, as outside the block.
        """
        with self._lock:
            if self._closed:
                return None
            if self._directory is None:
                self._directory = Path(tempfile.mkdtemp(prefix="trainparity-warm-servers-"))
                # A process that ends with the block still open (a notebook's kernel) leaves
                # no directory behind; its servers die with it (their parent-death signal).
                atexit.register(self.close)
            self._started += 1
            return self._directory, self._started - 1

    def in_own_thread(self, start: Callable[[], _T]) -> _T:
        """`start()`, run in this pool's own thread (a server's start: its parent-death signal
        then fires only when the pool's thread ends, at close or with the process)."""
        return self._thread.run(start)

    def give_back(self, key: Hashable, server: _Server) -> None:
        """`server` (of `key`) served a check: kept idle for the next, or stopped."""
        evicted: list[_Server] = []
        with self._lock:
            if self._closed:
                evicted.append(server)
            else:
                self._idle.append((key, server))
                while len(self._idle) > self.max_idle:
                    evicted.append(self._idle.pop(0)[1])  # idle longest
        for server in evicted:
            server.close()

    def __enter__(self) -> SharedWarmServers:
        with self._lock:
            if self._closed:
                raise RuntimeError("these shared warm servers are closed: open new ones")
        with _open_lock:
            _open.append(self)
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    def close(self) -> None:
        """Leave the block: stop every idle server and remove their directory (servers still
        borrowed stop when given back). Checks that start afterwards no longer use these."""
        with _open_lock:
            if self in _open:
                _open.remove(self)
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            directory, self._directory = self._directory, None
        for _, server in idle:
            server.close()
        # Servers still borrowed die with the thread (their parent-death signal), and are
        # reaped when given back.
        self._thread.close(wait=False)
        if directory is not None:
            atexit.unregister(self.close)
            shutil.rmtree(directory, ignore_errors=True)


class ServerThread:
    """The one thread warm servers are started from, kept until `close`.

    A server's parent-death signal fires when the thread that spawned it ends,
    not the process: started from a short-lived thread (a crash check's pool, a
    test's helper thread), it would die with that thread.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None  # its worker lives until shutdown

    def run(self, start: Callable[[], _T]) -> _T:
        """`start()` in the thread (made on first use); its result."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=self._name)
            executor = self._executor
        return executor.submit(start).result()

    def close(self, *, wait: bool = True) -> None:
        """End the thread; the servers it started get their parent-death signal."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait)


_open_lock = threading.Lock()
_open: list[SharedWarmServers] = []


def current_shared_servers() -> SharedWarmServers | None:
    """The innermost open `shared_warm_servers()` block's servers (any thread's), or None."""
    with _open_lock:
        return _open[-1] if _open else None


def shared_warm_servers(max_idle: int = DEFAULT_MAX_IDLE) -> SharedWarmServers:
    """Warm servers kept between the warm checks of this process: use it as a context manager.

    Every check with `start="warm"` (or TRAINPARITY_START=warm) that starts
    inside `with shared_warm_servers():`, in any thread, borrows its servers
    from here and gives them back when it ends; at most `max_idle` wait
    between checks. Leaving the block (or `close()`, where a block does not
    fit: a notebook's cells) stops them; so does the end of the process.
    Fresh checks are unaffected. Blocks nest: a check uses the innermost one.
    """
    return SharedWarmServers(max_idle)
