"""SIGTERM and SIGHUP during a check: unwind through the cleanup like Ctrl-C, then die by the signal.

While a check runs on the main thread, `terminating_signals_unwind()` turns
SIGTERM and SIGHUP into a TerminatedBySignal exception (a BaseException, so
no `except Exception` swallows it). It unwinds through the same paths as
KeyboardInterrupt: every child group is terminated and reaped, the temporary
run directory removed. When it leaves the scope that installed the handler,
the default disposition is restored and the signal raised again,
so the process ends as "killed by SIGTERM" (status 143 in a shell; SIGHUP:
129), as it would have without trainparity, only without leftovers.

Handlers are installed only for a signal whose disposition is the default:
a handler of the user's own (or SIG_IGN, as under nohup) is left alone and
not chained; if it raises, that exception unwinds through the same cleanup.
Off the main thread nothing is installed (Python allows handlers only there).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["TERMINATING_SIGNALS", "TerminatedBySignal", "terminating_signals_unwind"]

TERMINATING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""What CI runners, `timeout`, job schedulers and a closed terminal send to stop a process."""


class TerminatedBySignal(BaseException):
    """SIGTERM or SIGHUP arrived during a check; `signum` is the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"terminated by {signal.Signals(self.signum).name}"


@contextmanager
def terminating_signals_unwind() -> Iterator[None]:
    """SIGTERM/SIGHUP raise TerminatedBySignal inside; on leaving, the process dies by that signal.

    Only the first signal raises; later ones while the cleanup runs are
    noted and otherwise ignored, so the cleanup finishes (it is bounded: a
    second or so per child group, plus removing the run directory). A nested
    scope finds the outer scope's handler installed and installs nothing, so
    only the outermost one ends the process.
    """
    scope = _Scope()
    scope.install()
    try:
        yield
    finally:
        scope.close()


class _Scope:
    """The handlers one scope installed and the first signal they received."""

    def __init__(self) -> None:
        self.installed: list[int] = []
        self.received: int | None = None
        self.closing = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in TERMINATING_SIGNALS:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, self.handle)
                self.installed.append(signum)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None or self.closing:
            self.received = self.received or signum
            return
        self.received = signum
        raise TerminatedBySignal(signum)

    def close(self) -> None:
        self.closing = True
        for signum in self.installed:
            if signal.getsignal(signum) == self.handle:  # else the user replaced it meanwhile
                signal.signal(signum, signal.SIG_DFL)
        if self.received is not None:
            _die_by(self.received)


def _die_by(signum: int) -> None:
    """End the process by `signum` at its default disposition, as if never caught."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass  # closed or replaced streams must not keep us alive
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    signal.raise_signal(signum)
    # Reached only if native code installed a handler of its own in between;
    # the conventional status still tells the parent what happened.
    raise SystemExit(128 + signum)
