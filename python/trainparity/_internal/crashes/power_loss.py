"""Power loss at a crash point: what was not yet durable is dropped before the restart.

The model (docs/crashes.md, "Power loss") is the conservative POSIX one.
File data is durable once a `fsync`/`fdatasync` of the file covered it: data
written since the file's last fsync is lost (the file keeps the bytes it had
at that fsync, or none if it never had one). A name (a file created,
renamed, linked or removed; a directory made) is durable once its directory
was fsynced after the change. POSIX promises nothing more, and file systems
differ in which non-durable changes still survive, so two images are built,
and the job must restart correctly from both:

- "data": every name change persists (a journaling file system commits
  metadata in order) while unsynced data is lost. This is the image that
  leaves a zero-length file under its final name after a rename that was
  not preceded by a fsync of the file.
- "names": unsynced data is lost and so is every name change since its
  directory's last fsync (a directory never fsynced is empty; the checkpoint
  location itself is taken to exist).

Only calls under the checkpoint location are modelled (the tracer's root);
a file there that the job did not create while traced is taken as durable.
The bytes a fsync made durable are the file's bytes when the fsync was
called, copied by the tracer then (`copy_dir/<seq>`).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from trainparity._internal.processes.traced_job import FsEvent

__all__ = ["DATA_LOSS", "NAME_LOSS", "PowerLossModel", "apply_power_loss"]

DATA_LOSS, NAME_LOSS = "data", "names"
_DATA_OPS = frozenset({"write", "pwrite", "writev", "ftruncate", "truncate", "fallocate", "copy"})


@dataclass
class _File:
    dirty: bool = False  # written since its last fsync
    synced_copy: Path | None = None  # its bytes at its last fsync; None: never synced (empty)
    known: bool = True  # created while traced (else its durability is unknown: kept)


@dataclass
class PowerLossModel:
    """The namespace and durability of everything under the root, replayed from the trace."""

    names: dict[str, int] = field(default_factory=dict)  # file path -> file id
    directories: set[str] = field(default_factory=lambda: {""})
    files: dict[int, _File] = field(default_factory=dict)
    # A directory's entries at its last fsync: name -> ("file", id) | ("dir", None).
    durable_entries: dict[str, dict[str, tuple[str, int | None]]] = field(default_factory=dict)

    @classmethod
    def replay(cls, events: Sequence[FsEvent], copy_dir: Path) -> PowerLossModel:
        """The model after every mutation that ran (the killed one did not)."""
        model = cls()
        ids = itertools.count()
        for event in sorted((e for e in events if e.seq >= 0), key=lambda e: e.seq):
            if event.killed:
                break
            model._apply(event, copy_dir, ids)
        return model

    def _apply(self, event: FsEvent, copy_dir: Path, ids: itertools.count) -> None:
        op, path = event.op, event.path
        if op == "create":
            if path not in self.names:
                self.names[path] = next(ids)
                self.files[self.names[path]] = _File()
            else:
                self._file(path, ids).dirty = True  # truncated
        elif op in _DATA_OPS:
            self._file(path, ids).dirty = True
        elif op in ("fsync", "fdatasync"):
            if path in self.directories:
                self.durable_entries[path] = self._entries_of(path)
            else:
                synced = self._file(path, ids)
                synced.dirty = False
                synced.synced_copy = copy_dir / str(event.seq) if event.copied else None
        elif op == "rename" and event.target is not None:
            self._rename(path, event.target)
        elif op == "unlink":
            self.names.pop(path, None)
        elif op == "mkdir":
            self.directories.add(path)
        elif op == "rmdir":
            self.directories.discard(path)
        elif op == "link" and event.target is not None and path in self.names:
            self.names[event.target] = self.names[path]
        elif op == "symlink":
            self.names[path] = next(ids)
            self.files[self.names[path]] = _File(known=False)  # its target lives in the inode

    def _file(self, path: str, ids: itertools.count) -> _File:
        if path not in self.names:  # there before the trace began
            self.names[path] = next(ids)
            self.files[self.names[path]] = _File(known=False)
        return self.files[self.names[path]]

    def _rename(self, source: str, target: str) -> None:
        if source in self.directories:
            moved = {d for d in self.directories if d == source or d.startswith(source + "/")}
            self.directories -= moved
            self.directories |= {target + d[len(source) :] for d in moved}
            for name in [n for n in self.names if n.startswith(source + "/")]:
                self.names[target + name[len(source) :]] = self.names.pop(name)
        elif source in self.names:
            self.names[target] = self.names.pop(source)

    def _entries_of(self, directory: str) -> dict[str, tuple[str, int | None]]:
        entries: dict[str, tuple[str, int | None]] = {}
        for name, file_id in self.names.items():
            if _parent(name) == directory:
                entries[_leaf(name)] = ("file", file_id)
        for name in self.directories:
            if name and _parent(name) == directory:
                entries[_leaf(name)] = ("dir", None)
        return entries


def apply_power_loss(model: PowerLossModel, root: Path, kind: str, scratch: Path) -> None:
    """Turn the image under `root` (as the killed job left it) into the power-loss image `kind`."""
    if kind == DATA_LOSS:
        for name, file_id in model.names.items():
            state = model.files[file_id]
            path = root / name
            if state.known and state.dirty and path.is_file() and not path.is_symlink():
                _restore(path, state.synced_copy)
        return
    if kind != NAME_LOSS:
        raise ValueError(f"power loss kind must be {DATA_LOSS!r} or {NAME_LOSS!r}, got {kind!r}")
    # Rebuild the tree from each directory's durable entries, in a scratch directory.
    current = {file_id: root / name for name, file_id in model.names.items()}
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    _rebuild(model, "", scratch, current)
    for entry in list(root.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for entry in scratch.iterdir():
        shutil.move(str(entry), str(root / entry.name))
    scratch.rmdir()


def _rebuild(model: PowerLossModel, directory: str, target: Path, current: dict[int, Path]) -> None:
    for name, (kind, file_id) in sorted(model.durable_entries.get(directory, {}).items()):
        relative = f"{directory}/{name}" if directory else name
        if kind == "dir":
            (target / name).mkdir()
            _rebuild(model, relative, target / name, current)
            continue
        assert file_id is not None
        state = model.files[file_id]
        source = current.get(file_id)
        present = source is not None and source.exists()
        if present and not (state.known and state.dirty):
            shutil.copy2(source, target / name, follow_symlinks=False)
        else:
            _restore(target / name, state.synced_copy)


def _restore(path: Path, synced_copy: Path | None) -> None:
    if synced_copy is None:
        path.write_bytes(b"")
    else:
        shutil.copyfile(synced_copy, path)


def _parent(name: str) -> str:
    parent = str(PurePosixPath(name).parent)
    return "" if parent == "." else parent


def _leaf(name: str) -> str:
    return PurePosixPath(name).name
