"""Which modules a warm server may import ahead of its children, and whether its imports stayed so.

TRAINPARITY_WARM_PRELOAD names modules a server imports after torch: torch's own
(torch._dynamo), or those of libraries installed in this interpreter's site-packages
(a trainer library's modules), files that do not change between phases, as torch's do
not. Never the user's code (the cwd's, PYTHONPATH's) nor the standard library's: a phase must
import those as they are when it runs. The check refuses a name before it starts a server
(preload_refusal, locating only the top-level package, which imports nothing); the server
checks again where its imports found each module and that none of them loaded CUDA's driver,
which no forked child could then use (preloaded_refusal).

Standard library only: the server loads this file by its path (server.py), with nothing of
trainparity imported.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import sysconfig

__all__ = ["IDENTIFIER", "installed_library", "preload_refusal", "preloaded_refusal"]

# A variable's name, or one part of a dotted module name.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TORCH = "torch"
_CUDA_DRIVER = "/libcuda.so"


def preload_refusal(name: str) -> str | None:
    """Why a warm server may not import module `name` ahead of its children (None: it may)."""
    if not all(IDENTIFIER.fullmatch(part) for part in name.split(".")):
        return "not a module name"
    top = name.split(".")[0]
    if top == _TORCH:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"no module {top!r} is installed for this interpreter"
    return _outside_site_packages(top, _location(spec))


def preloaded_refusal(modules: list[str]) -> str | None:
    """In the server, after importing `modules`: why it must not fork (None: it may)."""
    for name in modules:
        top = name.split(".")[0]
        if top == _TORCH:
            continue
        module = sys.modules.get(top)
        spec = getattr(module, "__spec__", None)
        refusal = _outside_site_packages(top, _location(spec) if spec is not None else None)
        if refusal is not None:
            return f"preloading {name}: {refusal}"
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            driver = any(_CUDA_DRIVER in line for line in maps)
    except OSError:
        driver = False
    if driver:
        return (
            f"importing {', '.join(modules) or 'torch'} loaded CUDA's driver (libcuda), which "
            "a forked child cannot use: preload fewer modules"
        )
    return None


def installed_library(path: str) -> bool:
    """Whether `path` is inside one of this interpreter's site-packages directories."""
    real = os.path.realpath(path)
    paths = sysconfig.get_paths()
    for directory in {os.path.realpath(paths[key]) for key in ("purelib", "platlib")}:
        if os.path.commonpath([real, directory]) == directory:
            return True
    return False


def _location(spec) -> str | None:
    """Where a module's spec says it lives: its file, or a namespace package's first directory."""
    if spec.has_location and spec.origin:
        return spec.origin
    return next(iter(spec.submodule_search_locations or ()), None)


def _outside_site_packages(top: str, where: str | None) -> str | None:
    if where is not None and installed_library(where):
        return None
    return (
        "a warm server imports only torch's own modules and those of libraries installed "
        "in this interpreter's site-packages (such as torch._dynamo, or a trainer library), never the "
        f"user's code or the standard library ({top} is at {where or 'no file'})"
    )
