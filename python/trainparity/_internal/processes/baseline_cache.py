"""Uninterrupted baseline phases kept between checks: their key, their atomic store, their restore.

A check asked to `reuse_baselines` keeps each baseline phase's outputs (its
whole run directory: checkpoint, ID records, logs; its recording directory;
its process evidence) in a cache entry named by a digest of everything that
could change what the phase produces (BaselineKey). The next check whose
phase has the same key restores the entry instead of running the phase; any
other key runs it and stores the new entry. An entry is written in a
temporary directory and renamed into place, so a check never sees a half
written one, and every restored file is read back and checked against the
digest stored with it before the decision sequence reads it: a damaged entry
is run again, never trusted.

Where the key cannot be trusted (the command names a path outside the
check's cwd, whose files the key does not digest; a case class sent by
value; phases run elsewhere by an executor) the phase runs and nothing is
stored. `outcomes` says, per phase, which it did.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.distributed.phases import PHASE_TAG_VARIABLE
from trainparity._internal.distributed.rank_processes import RankProcessEvidence
from trainparity._internal.environment import machine_fingerprint
from trainparity._internal.processes.check_result import (
    ExternalProcessEvidence,
    NodeProcessEvidence,
)
from trainparity._internal.processes.check_runner import RunSettings
from trainparity._internal.version import PACKAGE_VERSION

__all__ = [
    "KEY_VERSION",
    "PER_LAUNCH_VARIABLES",
    "BaselineCache",
    "baseline_cache_of",
    "cache_directory",
    "checked_reuse_baselines",
    "reuse_outcomes",
]

# Bumped whenever what goes into a key or an entry changes: older entries are then misses.
KEY_VERSION = 1
RUN_DIR_PLACEHOLDER = "{run_root}"
# The children's TMPDIR (check_runner.py), a new directory per check: keyed as this.
TEMPORARY_DIR_PLACEHOLDER = "{tmp}"
# Variables a check gives each launch anew, which cannot change what a phase computes:
# the sweep tag (a fresh uuid per launch, only how the check finds the phase's processes
# to kill), and the free port a rank launcher is moved to beside other
# phases (PortRemedy: chosen per launch; the argv and environment before it are keyed);
# and pytest's name of the running test, which the checks of a suite pass on to their
# children and only torch.testing's internals read: two tests of one suite that run the
# same phase share its baselines. Every other variable the child gets is keyed, the run
# directory's paths (recordings, IDs, rank exits) with the run root replaced by
# RUN_DIR_PLACEHOLDER, and the check's TMPDIR by TEMPORARY_DIR_PLACEHOLDER.
PER_LAUNCH_VARIABLES = (PHASE_TAG_VARIABLE, "PYTEST_CURRENT_TEST")
_MANIFEST = "manifest.json"
_FILES = "files"
# Directories below the cwd that are never part of the project's code: tools' and
# environments' own trees (a venv is recognised by its pyvenv.cfg too).
_SKIPPED_DIRECTORIES = frozenset({"__pycache__", "node_modules", "site-packages"})


def baseline_cache_of(
    directory: Path,
    settings: RunSettings,
    case_spec: str,
    phases: Mapping[str, Mapping[str, Any]],
) -> BaselineCache:
    """The cache of one check's baseline `phases` (name → what their key holds besides the launch)."""
    untrusted = None
    if settings.executor is not None:
        untrusted = "the phases run through an executor, on machines the key does not fingerprint"
    return BaselineCache(
        directory,
        run_root=settings.run_root,
        temporary_dir=settings.temporary_dir,
        command_dir=settings.command_dir,
        case_spec=case_spec,
        start_mode=settings.starter.mode,
        phases=phases,
        untrusted=untrusted,
    )


def reuse_outcomes(cache: BaselineCache | None) -> dict[str, str] | None:
    """The report's `baselines_reused` (None, no key, when the check was not asked to reuse)."""
    return None if cache is None else dict(sorted(cache.outcomes.items()))


def checked_reuse_baselines(reuse_baselines: object) -> bool | Path:
    """`reuse_baselines` as check_resume/check_runs take it: False, True or a directory."""
    if isinstance(reuse_baselines, bool):
        return reuse_baselines
    if isinstance(reuse_baselines, (str, os.PathLike)) and str(reuse_baselines):
        return Path(reuse_baselines)
    raise TypeError(
        "reuse_baselines must be False, True (the default cache directory) or a directory "
        f"path, not {reuse_baselines!r}"
    )


def cache_directory(reuse_baselines: bool | Path) -> Path | None:
    """Where baselines are kept: the given directory, else $XDG_CACHE_HOME/trainparity/baselines
    (~/.cache/... without it); None when reuse is off."""
    if reuse_baselines is False:
        return None
    if isinstance(reuse_baselines, Path):
        return reuse_baselines.expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser().resolve() / "trainparity" / "baselines"


class BaselineCache:
    """The cache one check reads and fills: which phases it covers, and what it did for each.

    `phases` maps each cacheable phase to what the key holds besides its
    launch (end step, world size, layout, the policy's baseline count).
    `untrusted` says why no phase of this check can be keyed (None: each is
    judged by its own command).
    """

    def __init__(
        self,
        directory: Path,
        *,
        run_root: Path,
        command_dir: Path,
        case_spec: str,
        start_mode: str,
        temporary_dir: Path | None = None,
        phases: Mapping[str, Mapping[str, Any]],
        untrusted: str | None = None,
    ) -> None:
        self.directory = directory
        self.run_root = run_root
        self.temporary_dir = temporary_dir
        self.command_dir = command_dir
        self.phases = dict(phases)
        self.untrusted = untrusted or _case_untrusted(case_spec)
        self.outcomes: dict[str, str] = {}
        self._check_key: dict[str, Any] | None = None
        self._case_spec = case_spec
        self._start_mode = start_mode

    def covers(self, phase: str) -> bool:
        return phase in self.phases

    def key(
        self, phase: str, argv: Sequence[str], cwd: Path, environment: Mapping[str, str]
    ) -> tuple[str | None, str | None]:
        """(the key of one launch, None) or (None, why it cannot be trusted)."""
        if self.untrusted is not None:
            return None, self.untrusted
        try:
            return self._key(phase, argv, cwd, environment)
        except OSError as error:
            return None, f"a file the key digests cannot be read ({error})"

    def _key(
        self, phase: str, argv: Sequence[str], cwd: Path, environment: Mapping[str, str]
    ) -> tuple[str | None, str | None]:
        outside = self._outside_path(argv, cwd)
        if outside is not None:
            return None, (
                f"the command names {outside}, outside the cwd {self.command_dir}: the key "
                "does not digest its files"
            )
        named = self._named_files(argv, cwd)
        material = {
            "key_version": KEY_VERSION,
            **self._check_material(),
            "phase": phase,
            **self.phases[phase],
            "argv": [self._placeheld(item) for item in argv],
            "cwd": self._placeheld(str(cwd)),
            "environment": {
                name: self._placeheld(value)
                for name, value in sorted(environment.items())
                if name not in PER_LAUNCH_VARIABLES
            },
            "named_files": named,
        }
        encoded = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(encoded).hexdigest(), None

    def restore(
        self, key: str, targets: Mapping[str, Path]
    ) -> tuple[ExternalProcessEvidence | None, str | None]:
        """Copy entry `key`'s trees to `targets` (name → directory) and verify every file.

        (evidence, None) when restored; (None, None) on a miss; (None, why) when
        the entry exists but is not to be trusted (it is then removed).
        """
        entry = self.directory / key
        try:
            manifest = json.loads((entry / _MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as error:
            return None, self._discarded(entry, f"its manifest cannot be read ({error})")
        try:
            files: dict[str, list[Any]] = manifest["files"]
            evidence = _evidence_from(manifest["evidence"])
            if sorted(manifest["trees"]) != sorted(targets):
                return None, self._discarded(entry, "it holds other directories than this check's")
        except (KeyError, TypeError, ValueError) as error:
            return None, self._discarded(entry, f"its manifest is malformed ({error!r})")
        for name, target in targets.items():
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(target)
            source = entry / _FILES / name
            try:
                if source.is_dir():
                    shutil.copytree(source, target, dirs_exist_ok=True)
            except OSError as error:
                return None, self._discarded(entry, f"it cannot be copied ({error})", targets)
        # The copies are what the check reads: those are checked, every file the entry lists
        # and nothing else beside it.
        restored = dict(_tree_files(targets))
        if set(restored) != set(files):
            missing = sorted(set(files) ^ set(restored))[0]
            return None, self._discarded(entry, f"{missing} is missing or unexpected", targets)
        for relative, path in sorted(restored.items()):
            size, digest = files[relative]
            try:
                matches = path.stat().st_size == size and _file_digest(path) == digest
            except OSError as error:
                why = f"{relative} cannot be read back ({error})"
                return None, self._discarded(entry, why, targets)
            if not matches:
                why = f"{relative} does not match its digest"
                return None, self._discarded(entry, why, targets)
        return evidence, None

    def store(
        self, key: str, sources: Mapping[str, Path], evidence: ExternalProcessEvidence
    ) -> None:
        """Keep `sources` (name → directory) and `evidence` as entry `key`, atomically.

        A store that fails (a full disk, a read-only cache) costs the next check a
        rerun, never this check its verdict: it is skipped.
        """
        temporary = self.directory / f".tmp-{uuid.uuid4().hex}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for name, source in sources.items():
                destination = temporary / _FILES / name
                if source.is_dir():
                    shutil.copytree(source, destination, symlinks=False)
                else:
                    destination.mkdir(parents=True)
            files = {
                relative: [path.stat().st_size, _file_digest(path)]
                for relative, path in _tree_files(
                    {name: temporary / _FILES / name for name in sources}
                )
            }
            manifest = {
                "key_version": KEY_VERSION,
                "trees": sorted(sources),
                "files": dict(sorted(files.items())),
                "evidence": dataclasses.asdict(evidence),
            }
            (temporary / _MANIFEST).write_text(json.dumps(manifest, sort_keys=True))
            entry = self.directory / key
            if entry.exists():  # a damaged entry this check ran again: out of the way first
                _remove_aside(entry, self.directory)
            os.rename(temporary, entry)
        except OSError:
            pass  # another check stored the same key first, or the cache cannot be written
        finally:
            shutil.rmtree(temporary, ignore_errors=True)

    # Internals ------------------------------------------------------------------------

    def _check_material(self) -> dict[str, Any]:
        """What every phase of this check shares in its key, computed once."""
        if self._check_key is None:
            case_file = _case_module_file(self._case_spec)
            # Not the case spec itself: what it makes of a phase is its argv, cwd and
            # environment, keyed per phase (a command case whose faults only touch the resume
            # keys its baselines alike); the code behind it is its module's file.
            self._check_key = {
                "case_file": _file_record(case_file) if case_file is not None else None,
                "cwd_python_files": _python_files(
                    self.command_dir, (self.run_root, self.directory)
                ),
                "start": self._start_mode,
                "python": [platform.python_implementation(), platform.python_version()],
                "executable": sys.executable,
                "torch": _distribution_version("torch"),
                "trainparity": PACKAGE_VERSION,
                "machine": machine_fingerprint(),
            }
        return self._check_key

    def _placeheld(self, text: str) -> str:
        if self.temporary_dir is not None:
            text = text.replace(str(self.temporary_dir), TEMPORARY_DIR_PLACEHOLDER)
        return text.replace(str(self.run_root), RUN_DIR_PLACEHOLDER)

    def _paths_named(self, argv: Sequence[str], cwd: Path) -> Iterator[Path]:
        """Existing paths the arguments after the program name, outside the run root."""
        for argument in argv[1:]:
            for text in {argument, argument.partition("=")[2]}:
                if not text or str(self.run_root) in text:
                    continue
                path = Path(text) if os.path.isabs(text) else cwd / text
                try:
                    if path.exists():
                        yield path.resolve()
                except (OSError, ValueError):
                    continue

    def _outside_path(self, argv: Sequence[str], cwd: Path) -> Path | None:
        for path in self._paths_named(argv, cwd):
            if not path.is_relative_to(self.command_dir):
                return path
        return None

    def _named_files(self, argv: Sequence[str], cwd: Path) -> dict[str, list[Any]]:
        """The digest of every file (or every file under a directory) the command names."""
        named: dict[str, list[Any]] = {}
        for path in self._paths_named(argv, cwd):
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for file in files:
                named[str(file.relative_to(self.command_dir))] = _file_record(file)
        return dict(sorted(named.items()))

    def _discarded(self, entry: Path, why: str, targets: Mapping[str, Path] | None = None) -> str:
        """Why `entry` is not trusted; it is removed, and so is what it restored to `targets`."""
        _remove_aside(entry, self.directory)
        for target in (targets or {}).values():
            shutil.rmtree(target, ignore_errors=True)
        return f"the cached entry was not trusted: {why}"


def _case_untrusted(case_spec: str) -> str | None:
    if case_spec.startswith("by-value:"):
        return "the case class is sent by value (cloudpickle): it has no file to digest"
    return None


def _case_module_file(case_spec: str) -> Path | None:
    """The file of a `module:Class` spec's module, as this process imported it."""
    module_name, separator, _ = case_spec.partition(":")
    if not separator:
        return None
    module = sys.modules.get(module_name)
    module_file = getattr(module, "__file__", None)
    return Path(module_file) if module_file else None


def _python_files(directory: Path, excluded: Sequence[Path]) -> dict[str, list[Any]]:
    """Every `*.py` under `directory` and its digest, outside hidden, tool and venv directories."""
    found: dict[str, list[Any]] = {}
    skipped = {str(path) for path in excluded}
    for root, directories, names in os.walk(directory):
        directories[:] = sorted(
            name
            for name in directories
            if not name.startswith(".")
            and name not in _SKIPPED_DIRECTORIES
            and os.path.join(root, name) not in skipped
            and not os.path.exists(os.path.join(root, name, "pyvenv.cfg"))
        )
        for name in sorted(names):
            if name.endswith(".py"):
                path = Path(root) / name
                found[str(path.relative_to(directory))] = _file_record(path)
    return dict(sorted(found.items()))


def _file_record(path: Path) -> list[Any]:
    return [path.stat().st_size, _file_digest(path)]


def _file_digest(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _tree_files(trees: Mapping[str, Path]) -> Iterator[tuple[str, Path]]:
    """(name/relative path, path) of every file under each tree."""
    for name, tree in sorted(trees.items()):
        if not tree.is_dir():
            continue
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                yield f"{name}/{path.relative_to(tree).as_posix()}", path


def _distribution_version(name: str) -> str | None:
    """An installed distribution's version, read without importing it (torch is slow to import)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _remove_aside(entry: Path, directory: Path) -> None:
    """Remove `entry` so that no reader sees it half removed: rename it away, then delete."""
    aside = directory / f".old-{uuid.uuid4().hex}"
    try:
        os.rename(entry, aside)
    except OSError:
        return  # another check removed (or replaced) it first
    shutil.rmtree(aside, ignore_errors=True)


def _evidence_from(record: Mapping[str, Any]) -> ExternalProcessEvidence:
    """The process evidence a manifest holds (dataclasses.asdict of it)."""
    if record.get("returncode") != 0:
        raise ValueError("a stored baseline must have exited with status 0")
    return ExternalProcessEvidence(
        **{
            **record,
            "ranks": tuple(RankProcessEvidence(**rank) for rank in record.get("ranks", ())),
            "nodes": tuple(NodeProcessEvidence(**node) for node in record.get("nodes", ())),
        }
    )
