"""PYTHONPATH and warm servers: children whose PYTHONPATH differs share a server, as fresh ones.

A server starts without the children's PYTHONPATH; a child forked from it gets
the sys.path a fresh interpreter's PYTHONPATH makes, unless the server's
imports looked up something its directories hold (path_lookups.py): that
child gets a server started with its PYTHONPATH. Each case below is compared
with a fresh interpreter's sys.path and behaviour.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trainparity._internal.processes.group import ChildGroup, ChildSpec, spawn_child
from trainparity._internal.processes.warm import path_lookups
from trainparity._internal.processes.warm.path_lookups import (
    fresh_sys_path,
    path_conflict,
    python_path_entries,
    searched_first,
)
from trainparity._internal.processes.warm.pool import SharedWarmServers
from trainparity._internal.processes.warm.starter import ChildStarter

PATH_PROBE = (
    "import builtins, json, sys; print(json.dumps([sys.path, getattr(builtins, 'SITE', None)]))"
)


def _fresh_sys_path(cwd: Path, python_path: str | None) -> list[str]:
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if python_path is not None:
        environment["PYTHONPATH"] = python_path
    printed = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
        cwd=cwd, env=environment, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return json.loads(printed)


@pytest.mark.parametrize(
    "python_path",
    ["a:b", "a::b", ":", "", "a:a:./a/", "missing:b/../a", "{site}:a", "{stdlib}:b", "~/x:a"],
)
def test_the_entries_and_their_order_are_a_fresh_interpreters(tmp_path, python_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base = _fresh_sys_path(tmp_path, None)
    value = python_path.format(site=base[-1], stdlib=base[2])
    entries = python_path_entries(value, str(tmp_path))
    assert fresh_sys_path("", entries, base[1:]) == _fresh_sys_path(tmp_path, value)


def _lookups(**recorded) -> dict:
    return {
        "modules": [],
        "found": {},
        "fixed": [],
        "path": [],
        "distributions": [],
        "groups": [],
        "everything": False,
        **recorded,
    }


def test_a_directory_shadowing_what_the_server_looked_up_is_a_conflict(tmp_path):
    (tmp_path / "numpy.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text("")
    entries = [str(tmp_path)]
    assert path_conflict(entries, _lookups(modules=["torch", "json"])) is None
    for found in ("numpy", "pkg"):
        said = path_conflict(entries, _lookups(modules=[found]))
        assert said is not None and f"the module {found!r}" in said, said
    # Where the server found a module there itself, the same file is found first: no conflict;
    # a built-in or frozen module is never looked up on sys.path.
    here = {"found": {"numpy": [str(tmp_path)]}, "path": [str(tmp_path)]}
    assert path_conflict(entries, _lookups(modules=["numpy"], **here)) is None
    assert path_conflict(entries, _lookups(modules=["numpy"], fixed=["numpy"])) is None
    (tmp_path / "sitecustomize.py").write_text("")
    assert "fresh interpreter's start" in path_conflict(entries, _lookups())
    archive = tmp_path / "code.zip"
    archive.write_bytes(b"")
    assert "zip archive" in path_conflict([str(archive)], _lookups())
    assert path_conflict([str(tmp_path / "missing")], _lookups(modules=["numpy"])) is None


def test_only_what_the_import_system_could_load_there_is_a_conflict(tmp_path):
    # A console script beside the interpreter (`bin/deepspeed`), a data file or a backup of a
    # module's name is no module: a fresh interpreter's import passes over it.
    for name in ("deepspeed", "deepspeed.txt", "deepspeed.py.orig"):
        (tmp_path / name).write_text("")
    entries = [str(tmp_path)]
    assert path_conflict(entries, _lookups(modules=["deepspeed"])) is None
    for name in ("deepspeed.py", "deepspeed.pyc", "deepspeed.abi3.so"):
        module = tmp_path / name
        module.write_text("")
        said = path_conflict(entries, _lookups(modules=["deepspeed"]))
        assert said is not None and said.startswith(str(module)), said
        module.unlink()
    (tmp_path / "deepspeed").unlink()
    (tmp_path / "deepspeed").mkdir()  # a package, or a namespace package's portion
    assert path_conflict(entries, _lookups(modules=["deepspeed"])) is not None


def test_metadata_conflicts_only_where_the_servers_imports_read_it(tmp_path):
    metadata = tmp_path / "my_plugin-1.0.dist-info"
    metadata.mkdir()
    (metadata / "entry_points.txt").write_text(
        "[console_scripts]\nx = y:z\n[torch.backends]\nb = c\n"
    )
    (tmp_path / "project.egg-info").mkdir()
    entries = [str(tmp_path)]
    assert path_conflict(entries, _lookups(groups=["other.group"])) is None
    assert "torch.backends" in path_conflict(entries, _lookups(groups=["torch.backends"]))
    assert "read" in path_conflict(entries, _lookups(distributions=["my-plugin"]))
    assert "project.egg-info" in path_conflict(entries, _lookups(distributions=["project"]))
    assert "listed them all" in path_conflict(entries, _lookups(everything=True))


def test_the_recorder_notes_lookups_and_leaves_no_trace(tmp_path):
    script = """
import importlib.metadata, importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
import path_lookups
recorder = path_lookups.LookupRecorder()
meta_path, entry_points = list(sys.meta_path), importlib.metadata.entry_points
recorder.install()
try:
    import no_such_module_here
except ImportError:
    pass
importlib.util.find_spec("another_missing_one")
importlib.metadata.version("pip")
importlib.metadata.entry_points(group="some.group")
recorder.uninstall()
lookups = recorder.lookups()
print(json.dumps([lookups, sys.meta_path == meta_path,
                  importlib.metadata.entry_points is entry_points]))
"""
    here = Path(path_lookups.__file__).parent
    printed = subprocess.run(
        [sys.executable, "-c", script, str(here)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    lookups, meta_path_restored, entry_points_restored = json.loads(printed)
    assert {"no_such_module_here", "another_missing_one", "json"} <= set(lookups["modules"])
    assert lookups["distributions"] == ["pip"] and lookups["groups"] == ["some.group"]
    assert not lookups["everything"] and meta_path_restored and entry_points_restored


@pytest.fixture(scope="module")
def servers():
    servers = SharedWarmServers()
    yield servers
    servers.close()


def _run(launch, name: str, cwd: Path, python_path: str | None, out: Path, argv=None) -> str:
    environment = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    if python_path is not None:
        environment["PYTHONPATH"] = python_path
    spec = ChildSpec(
        name=name,
        argv=argv or [sys.executable, "-c", PATH_PROBE],
        cwd=cwd,
        env=environment,
        stdout_path=out / f"{name}.out",
        stderr_path=out / f"{name}.err",
    )
    with ChildGroup(launcher=launch) as group:
        group.start(spec, timeout=120)
        result = group.wait_for(name)
    assert result.exit_code == 0, (out / f"{name}.err").read_text()
    return (out / f"{name}.out").read_text()


def test_children_of_other_pythonpaths_share_a_server_with_a_fresh_ones_sys_path(tmp_path, servers):
    """Two projects, as two checks' cwds: one server forks both, each with its own sys.path."""
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120, shared=servers)
    try:
        for project in ("one", "two"):
            cwd = tmp_path / project
            (cwd / "code").mkdir(parents=True)
            python_path = f"{cwd}:code:{os.environ.get('PYTHONPATH', '')}"
            warm = _run(starter.launch, f"{project}-warm", cwd, python_path, tmp_path)
            fresh = _run(spawn_child, f"{project}-fresh", cwd, python_path, tmp_path)
            assert warm == fresh
            assert json.loads(warm)[0][1:3] == [str(cwd), str(cwd.resolve() / "code")]
        assert starter.report["warm"] == ["one-warm", "two-warm"]
        assert len(starter._servers) == 1
    finally:
        starter.close()


def test_a_pythonpath_with_a_sitecustomize_gets_a_server_of_its_own(tmp_path, servers):
    """A fresh interpreter runs the sitecustomize it finds there at its start: so does the
    server started with that PYTHONPATH, whose child then sees what it did. Its relative
    entry is the child's cwd's directory, as a fresh one's, not the server's."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import builtins\nbuiltins.SITE = 'ran'\n")
    (tmp_path / "code").mkdir()
    python_path = f"{tmp_path / 'site'}:code:{os.environ.get('PYTHONPATH', '')}"
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120, shared=servers)
    try:
        warm = _run(starter.launch, "warm", tmp_path, python_path, tmp_path)
        fresh = _run(spawn_child, "fresh", tmp_path, python_path, tmp_path)
        assert warm == fresh and json.loads(warm)[1] == "ran"
        assert str(tmp_path.resolve() / "code") in json.loads(warm)[0]
        assert starter.report["warm"] == ["warm"]
        own = [key for key in starter._servers if "PYTHONPATH" in dict(key[0])]
        assert len(starter._servers) == 2 and len(own) == 1
    finally:
        starter.close()


MONKEYTYPE_PROBE = "import builtins, torch; print(getattr(builtins, 'MONKEY', None))"


def test_a_script_beside_a_module_torch_looks_for_starts_fresh(tmp_path, servers):
    """torch's import tries `import monkeytype` (and carries on without it): a fresh script
    beside a monkeytype.py imports that file, which no server's import of torch did."""
    (tmp_path / "monkeytype.py").write_text("import builtins\nbuiltins.MONKEY = 'imported'\n")
    (tmp_path / "probe.py").write_text(MONKEYTYPE_PROBE)
    assert searched_first([sys.executable, "probe.py"], str(tmp_path)) == str(tmp_path.resolve())
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120, shared=servers)
    argv = [sys.executable, "probe.py"]
    python_path = os.environ.get("PYTHONPATH")
    try:
        outputs = [
            _run(launch, name, tmp_path, python_path, tmp_path, argv)
            for name, launch in (("warm", starter.launch), ("fresh", spawn_child))
        ]
        assert outputs == ["imported\n", "imported\n"]
        reason = starter.report["fresh"]["warm"]
        assert "monkeytype.py" in reason and "a fresh interpreter would import otherwise" in reason
    finally:
        starter.close()


def test_the_interpreters_own_site_packages_on_pythonpath_shares_the_server(tmp_path, servers):
    """A check of a case module installed in site-packages puts that directory first on its
    children's PYTHONPATH: what the server found there it finds there first, so one server
    forks the child, with a fresh one's sys.path (site-packages ahead of the standard library)."""
    import sysconfig

    site_packages = sysconfig.get_paths()["purelib"]
    starter = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120, shared=servers)
    try:
        warm = _run(starter.launch, "warm", tmp_path, site_packages, tmp_path)
        fresh = _run(spawn_child, "fresh", tmp_path, site_packages, tmp_path)
        assert warm == fresh and json.loads(warm)[0][1] == site_packages
        assert starter.report["warm"] == ["warm"] and len(starter._servers) == 1
    finally:
        starter.close()
