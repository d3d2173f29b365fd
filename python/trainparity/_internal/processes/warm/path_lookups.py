"""Whether a warm server's imports would have found the same files under a child's PYTHONPATH.

A fresh `python` puts PYTHONPATH's directories on sys.path before the standard
library and site-packages, so every import it makes, torch's included, looks
there first. A server started without the phase's PYTHONPATH can still fork
that phase when nothing its imports looked up on sys.path would have been
found in those directories instead: no module or package of a top-level name
the server imported or asked for (a failed optional import counts), no
distribution's metadata it read by name, no entry point of a group it
listed (torch lists `torch.backends` on import), and no sitecustomize or
usercustomize, which a fresh interpreter runs at start. Then the phase's
child needs only its sys.path rebuilt as a fresh one's (`fresh_sys_path`),
and servers are shared across checks whose children differ in PYTHONPATH
alone: every check puts its own cwd there.

`LookupRecorder` is installed in the server before its imports and records
those lookups (a finder first on sys.meta_path that finds nothing, and
importlib.metadata's entry_points); the child uninstalls it. `path_conflict`
says why a child's PYTHONPATH must have a server of its own, from what was
recorded.

Standard library only: the server loads this file by its path (server.py),
with nothing of trainparity imported.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
from typing import Any

__all__ = [
    "LookupRecorder",
    "PATH_VARIABLE",
    "fresh_sys_path",
    "path_conflict",
    "python_path_entries",
    "searched_first",
]

PATH_VARIABLE = "PYTHONPATH"
# Run by site at a fresh interpreter's start when found on sys.path.
_STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize"})
_METADATA_SUFFIXES = (".dist-info", ".egg-info")
# What follows a module's name in a file the import system loads (.py, .pyc, extensions).
_MODULE_SUFFIXES = frozenset(importlib.machinery.all_suffixes())


def python_path_entries(value: str, cwd: str) -> list[str]:
    """The directories PYTHONPATH=`value` puts on a fresh interpreter's sys.path, started in `cwd`.

    As CPython and site make them: split on os.pathsep, each made absolute
    against the start directory (an empty one is that directory), normalized;
    duplicates are removed with the rest of sys.path (fresh_sys_path).
    """
    if not value:
        return []
    return [os.path.abspath(os.path.join(cwd, item)) for item in value.split(os.pathsep)]


def searched_first(argv: list[str], cwd: str) -> str:
    """The directory a fresh `python` with `argv` started in `cwd` puts first on sys.path: its
    script's (symlinks resolved), else the cwd (`-m`, and `-c`'s "")."""
    if len(argv) > 1 and argv[1] not in ("-m", "-c"):
        return os.path.dirname(os.path.realpath(os.path.join(cwd, argv[1])))
    return os.path.realpath(cwd)


def fresh_sys_path(first: str, entries: list[str], rest: list[str]) -> list[str]:
    """sys.path of a fresh interpreter: `first` (the script's directory, or the cwd), then
    PYTHONPATH's `entries` and the interpreter's own `rest`, each kept where it first appears
    (site removes later duplicates, never sys.path[0], which is added after it ran)."""
    kept: list[str] = []
    seen: set[str] = set()
    for entry in [*entries, *rest]:
        key = os.path.normcase(os.path.abspath(entry))
        if key not in seen:
            seen.add(key)
            kept.append(entry)
    return [first, *kept]


def path_conflict(entries: list[str], lookups: dict[str, Any]) -> str | None:
    """Why a child that searches `entries` before the server's own sys.path[1:] (its
    script's directory or cwd, then its PYTHONPATH's) cannot be forked from a server that made
    `lookups` (LookupRecorder.lookups), or None when its imports would have found the same."""
    found = {name: set(directories) for name, directories in lookups["found"].items()}
    looked_up = set(lookups["modules"]) - set(lookups["fixed"])
    server_path = {_directory_key(entry) for entry in lookups["path"]}
    settled: set[str] = set()  # found first where the server found them
    for entry in entries:
        if os.path.isfile(entry):
            return f"PYTHONPATH names a file ({entry}), which Python reads as a zip archive"
        try:
            names = os.listdir(entry)
        except OSError:
            continue  # no such directory: a fresh import finds nothing there either
        key = _directory_key(entry)
        seen_by_server = key in server_path
        for name in sorted(names):
            if name.endswith(_METADATA_SUFFIXES):
                if seen_by_server:
                    continue  # the server's imports read the same metadata there
                reason = _metadata_conflict(entry, name, lookups)
            else:
                top = name.partition(".")[0]
                startup = top in _STARTUP_MODULES and not seen_by_server
                if not startup and (top in settled or top not in looked_up):
                    continue
                if not _importable(entry, name, top):  # a stat: only for names that matter
                    continue  # a console script beside the interpreter, a data file
                if startup:
                    reason = "would run at a fresh interpreter's start"
                elif key in found.get(top, ()):
                    settled.add(top)
                    continue
                else:
                    reason = f"would be found before the module {top!r} the server's imports found elsewhere"
            if reason is not None:
                return f"{os.path.join(entry, name)} {reason}"
    return None


def _importable(entry: str, name: str, top: str) -> bool:
    """Whether the directory entry `name` could be imported as module `top`: a directory
    (a package, or part of a namespace package), or a file with an import suffix."""
    if name == top:
        return os.path.isdir(os.path.join(entry, name))
    return name[len(top) :] in _MODULE_SUFFIXES


def _metadata_conflict(entry: str, name: str, lookups: dict[str, Any]) -> str | None:
    """Whether a distribution's metadata directory there would have changed what the
    server's imports read (by name, or a listing of every distribution)."""
    distribution = _normalized(name.rpartition(".")[0].partition("-")[0])
    if lookups["everything"]:
        return "is a distribution's metadata, and the server's imports listed them all"
    if distribution in lookups["distributions"]:
        return "is the metadata of a distribution the server's imports read"
    declared = _entry_point_groups(os.path.join(entry, name)) & set(lookups["groups"])
    if declared:
        return f"declares entry points ({', '.join(sorted(declared))}) the server's imports listed"
    return None


def _directory_key(path: str) -> str:
    return os.path.normcase(os.path.abspath(path))


def _found_in(spec: Any) -> list[str] | None:
    """The sys.path directories a module's spec was found in; None where no path was searched
    (a built-in or frozen module, which no directory on sys.path can shadow)."""
    locations = getattr(spec, "submodule_search_locations", None)
    if locations:  # a package (a namespace package may span several directories)
        return sorted({_directory_key(os.path.dirname(location)) for location in locations})
    origin = getattr(spec, "origin", None)
    if origin in ("built-in", "frozen"):
        return None
    if origin and getattr(spec, "has_location", False):
        return [_directory_key(os.path.dirname(origin))]
    return []  # found some other way: shadowed by any file of its name


def _entry_point_groups(metadata: str) -> set[str]:
    """The groups `[group]` in a metadata directory's entry_points.txt."""
    try:
        with open(os.path.join(metadata, "entry_points.txt"), encoding="utf-8") as text:
            lines = text.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    return {line.strip()[1:-1].strip() for line in lines if line.strip().startswith("[")}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class LookupRecorder:
    """Records what imports look up on sys.path, from `install()` to `uninstall()`.

    First on sys.meta_path, it finds nothing and notes each top-level name
    looked up (an import, importlib.util.find_spec), and each distribution
    importlib.metadata searches for; entry_points() is wrapped to note the
    group a listing of every distribution selects (None: a listing of all).
    """

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.distributions: set[str] = set()
        self.groups: set[str] = set()
        self.everything = False
        self._selecting: list[str | None] = []
        self._entry_points: Any = None

    def install(self) -> None:
        import importlib.metadata as metadata

        sys.meta_path.insert(0, self)
        self._entry_points = original = metadata.entry_points

        def entry_points(**selection: Any) -> Any:
            group = selection.get("group") if set(selection) <= {"group", "name"} else None
            self._selecting.append(group)
            try:
                return original(**selection)
            finally:
                self._selecting.pop()

        metadata.entry_points = entry_points

    def uninstall(self) -> None:
        """Leaves sys.meta_path and importlib.metadata as a fresh interpreter has them."""
        import importlib.metadata as metadata

        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if self._entry_points is not None:
            metadata.entry_points = self._entry_points

    def lookups(self) -> dict[str, Any]:
        """What was looked up so far, and every top-level module imported (the interpreter's
        start imported some before install: site's, those .pth files name)."""
        found: dict[str, list[str]] = {}
        fixed = []
        for name, module in list(sys.modules.items()):
            if "." in name or name == "__main__":  # __main__ is never looked up on sys.path
                continue
            directories = _found_in(getattr(module, "__spec__", None))
            if directories is None:
                fixed.append(name)
            else:
                found[name] = directories
        return {
            "modules": sorted(self.modules | set(found) | set(fixed)),
            "found": found,
            "fixed": sorted(fixed),
            "path": list(sys.path[1:]),
            "distributions": sorted(self.distributions),
            "groups": sorted(self.groups),
            "everything": self.everything,
        }

    # The meta path finder protocol.
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if path is None:  # a top-level name: looked up on sys.path
            self.modules.add(fullname.partition(".")[0])
        return None

    def find_distributions(self, context: Any = None) -> Any:
        name = getattr(context, "name", None)
        if name is not None:
            self.distributions.add(_normalized(name))
        elif self._selecting and self._selecting[-1] is not None:
            self.groups.add(self._selecting[-1])
        else:
            self.everything = True
        return iter(())
