"""The package's import graph, read from the sources: no cycles, and every arrow runs down the layers.

The layer order is declared once, here (LAYERS): the public surface and the
command line; the checks, one wing each; the processes layer and the packages
beside it; cases; state and comparison; reports; the native core; the
foundation modules that everything may use. docs/design.md draws the same
order, and a test below holds its layer block to LAYERS and to the tree.
Imports inside functions count like any other, and so does `from trainparity
import name` when `name` is a module. Faces (thin re-exports kept at contract
and documented paths) sit at the top, and no module below the top may import a
face: internal code names a module's home.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import trainparity

PACKAGE_ROOT = Path(trainparity.__file__).resolve().parent
REPOSITORY = Path(__file__).resolve().parents[1]
SOURCE_ROOT = REPOSITORY / "python" / "trainparity"
# The sources when the checkout is at hand, else the installed copy (same files).
ROOT = SOURCE_ROOT if SOURCE_ROOT.is_dir() else PACKAGE_ROOT
DESIGN_DOC = REPOSITORY / "docs" / "design.md"

SURFACE, CHECKS, PROCESSES, CASES, STATE, REPORTS, NATIVE, FOUNDATION = range(8)
LAYER_NAMES = (
    "surface",
    "checks",
    "processes",
    "cases",
    "state",
    "reports",
    "native",
    "foundation",
)

# The first component below `trainparity`, and the layer it lives in.
LAYERS = {
    "__main__": SURFACE,
    "api": SURFACE,
    "testing": SURFACE,
    "pytest_plugin": SURFACE,
    "cli": SURFACE,
    "integrations": SURFACE,
    "resume": CHECKS,
    "runs": CHECKS,
    "why": CHECKS,
    "accumulation": CHECKS,
    "coverage": CHECKS,
    "processes": PROCESSES,
    "distributed": PROCESSES,
    "recording": PROCESSES,
    "forensics": PROCESSES,
    # Executors run the phases elsewhere (SLURM, a plan's replay): beside processes/, whose
    # seam (processes/executor.py) they implement; only the checks and the CLI choose one.
    "executors": PROCESSES,
    "cases": CASES,
    "checkpoints": CASES,
    "state": STATE,
    "comparison": STATE,
    "reports": REPORTS,
    "native": NATIVE,
    "_trainparity": NATIVE,
    "environment": FOUNDATION,
    "environment_leads": FOUNDATION,
    "error_text": FOUNDATION,
    "lazy_names": FOUNDATION,
    "outcomes": FOUNDATION,
    "protocols": FOUNDATION,
    "version": FOUNDATION,
}

FACES = frozenset(
    {
        "trainparity.process_resume",
        "trainparity.sample_coverage",
        "trainparity.results",
        "trainparity.snapshot",
        "trainparity.snapshot_file",
        "trainparity.snapshot_diff",
        "trainparity.display",
        "trainparity.html_report",
        "trainparity.cuda_backend",
        "trainparity.phase_plan",
        "trainparity.progress",
        "trainparity.termination",
        "trainparity.distributed.ids_audit",
        "trainparity.distributed.record_ids",
        "trainparity.importing",
        # Wing and layer packages whose own names are a contract or documented path:
        "trainparity.accumulation",
        "trainparity.state",
        "trainparity.comparison",
        "trainparity.processes",
    }
)


def module_files() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("trainparity", *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every trainparity module `name` imports, at module level or inside a function."""

    def known(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import sub` imports the module pkg.sub; `from mod import name` imports mod.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
            if base == "trainparity":
                targets = [
                    f"trainparity.{alias.name}" if alias.name == "_trainparity" else target
                    for alias, target in zip(node.names, targets, strict=True)
                ]
        else:
            continue
        for target in targets:
            if target == "trainparity._trainparity":
                found.add(target)
            elif target.startswith("trainparity") and (resolved := known(target)):
                found.add(resolved)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> int:
    if module == "trainparity" or module in FACES:
        return SURFACE
    component = module.split(".")[1]
    assert component in LAYERS, f"{module}: give its package a layer in tests/test_import_layers.py"
    return LAYERS[component]


def test_the_graph_is_read_from_the_real_sources():
    graph = import_graph()
    assert len(graph) > 80
    assert "trainparity.resume.execution" in graph["trainparity.resume.check"]
    # An import inside a function counts.
    assert "trainparity.forensics.step_trace" in graph["trainparity.recording.recorder"]


def test_no_import_cycles():
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == [], "\n".join(" -> ".join(cycle) for cycle in cycles)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import in `graph` from a module to one of a higher layer, as readable lines."""
    return [
        f"{module} ({LAYER_NAMES[layer_of(module)]}) -> {target} ({LAYER_NAMES[layer_of(target)]})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer_of(target) < layer_of(module)
    ]


def test_every_import_runs_down_the_layers():
    upward = upward_imports(import_graph())
    assert upward == [], "\n".join(upward)


def test_an_upward_import_is_caught():
    """The check itself can fail: an import from the native core up to a check, or from state up to processes."""
    graph = {
        "trainparity.native.core": {"trainparity.resume.check"},
        "trainparity.state.freeze": {"trainparity.processes.group", "trainparity.native.core"},
    }
    assert upward_imports(graph) == [
        "trainparity.native.core (native) -> trainparity.resume.check (checks)",
        "trainparity.state.freeze (state) -> trainparity.processes.group (processes)",
    ]


def test_no_two_packages_import_each_other():
    """Between two subpackages (wings, layers, the packages beside them) arrows run one way only.

    Faces count too: a face kept inside a package (distributed/ids_audit.py) ties
    that package to its home's, so the home's package must not import it back.
    """

    def package(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 2 else module

    ties = {
        (package(module), package(target))
        for module, targets in import_graph().items()
        for target in targets
        if package(module) != package(target)
    }
    both_ways = sorted(f"{a} <-> {b}" for a, b in ties if (b, a) in ties and a < b)
    assert both_ways == [], "\n".join(both_ways)


def test_no_module_below_the_surface_imports_a_face():
    through_faces = [
        f"{module} -> {target}"
        for module, targets in sorted(import_graph().items())
        if module not in FACES and layer_of(module) != SURFACE
        for target in sorted(targets & FACES)
    ]
    assert through_faces == [], "\n".join(through_faces)


def test_faces_only_re_export():
    for face in sorted(FACES - {"trainparity.accumulation"}):
        path = module_files()[face]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        body = tree.body[1:] if ast.get_docstring(tree) else tree.body
        assert all(isinstance(node, ast.ImportFrom) for node in body), face
        if path.name != "__init__.py":
            assert len(path.read_text(encoding="utf-8").splitlines()) <= 40, face


def test_workers_never_import_their_orchestrators():
    graph = import_graph()

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for target in graph.get(todo.pop(), set()) - seen:
                seen.add(target)
                todo.append(target)
        return seen

    assert "trainparity.accumulation.check" not in reachable("trainparity.accumulation.worker")
    assert "trainparity.accumulation.execution" not in reachable("trainparity.accumulation.worker")
    assert "trainparity.accumulation.rank_orchestration" not in reachable(
        "trainparity.accumulation.worker"
    )
    # The observer worker is launched as `python -m trainparity.processes.observer`: the package
    # (importing nothing), then its __main__, which runs the worker.
    assert graph["trainparity.processes.observer"] == set()
    assert "trainparity.processes.observer.worker" in reachable(
        "trainparity.processes.observer.__main__"
    )
    for start in (
        "trainparity.processes.observer.__main__",
        "trainparity.processes.observer.worker",
    ):
        assert "trainparity.processes.observer.client" not in reachable(start)
    # The package the worker is launched from hands out the check's names only on first use,
    # through a helper that imports nothing of trainparity's.
    assert graph["trainparity.accumulation"] == {"trainparity.lazy_names"}
    assert graph["trainparity.lazy_names"] == set()


def test_top_level_holds_at_most_twelve_modules_with_code():
    with_code = sorted(
        path.stem
        for path in ROOT.glob("*.py")
        if f"trainparity.{path.stem}" not in FACES and path.stem != "__init__"
    )
    assert len(with_code) + 1 <= 12, with_code  # + __init__


def design_layer_block() -> dict[str, tuple[int, str]]:
    """docs/design.md's layer block: each package (`name/`) or top-level module it places, with
    its layer and the text that describes it.

    Column 0 holds a layer's name where that layer starts; column 15 a package
    (`cli/`), a row of top-level modules, or `faces` (a row of faces), each
    followed by its description; deeper-indented lines continue it.
    """
    text = DESIGN_DOC.read_text(encoding="utf-8")
    block = text.split("## Layers\n", 1)[1].split("```\n", 2)[1]
    entries: dict[str, tuple[int, str]] = {}
    layer, current = None, None
    for line in block.splitlines():
        if line.strip() in ("", "│"):
            continue
        if line[:15].strip():
            layer = LAYER_NAMES.index(line[:15].strip())
        field = line[15:]
        if field[:1].strip():
            first, _, rest = field.partition(" ")
            if first.endswith("/") or first == "faces":
                head, description = first, rest.strip()
            else:  # a row of top-level modules, then (after a wider gap) its description
                head, _, description = field.partition("   ")
            grouped = head.endswith("/") or head == "faces"  # a row continued below
            names = [head] if grouped else head.split()
            for name in names:
                entries[name] = (layer, description)
            current = head if grouped else None
        elif current is not None:
            layer_of_current, description = entries[current]
            entries[current] = (layer_of_current, f"{description} {field.strip()}")
    # The faces row lists its modules before a colon.
    if "faces" in entries:
        layer, description = entries.pop("faces")
        for name in description.split(":")[0].split():
            entries[name] = (layer, description)
    return entries


def test_the_design_doc_draws_every_room_in_its_declared_layer():
    """docs/design.md's layer block places each package and top-level module where LAYERS does,
    and names every module and subpackage of each package: the table matches the tree."""
    drawn = design_layer_block()
    problems = []
    for path in sorted(ROOT.iterdir()):
        if path.name.startswith(("_", ".")) and path.name not in ("__init__.py", "__main__.py"):
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            # A package is placed by LAYERS even where its __init__ is a face (trainparity.state).
            name, layer = f"{path.name}/", LAYERS[path.name]
        elif path.suffix == ".py":
            module = "trainparity" if path.stem == "__init__" else f"trainparity.{path.stem}"
            name, layer = path.stem, layer_of(module)
        else:
            continue
        if name not in drawn:
            problems.append(f"{name}: not in docs/design.md's layer block")
            continue
        if drawn[name][0] != layer:
            problems.append(
                f"{name}: drawn under {LAYER_NAMES[drawn[name][0]]}, declared {LAYER_NAMES[layer]}"
            )
        if path.is_dir():
            words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*/?", drawn[name][1]))
            for inner in sorted(path.iterdir()):
                if inner.is_dir() and (inner / "__init__.py").exists():
                    if f"{inner.name}/" not in words:
                        problems.append(f"{name}{inner.name}/: not named in {name}'s row")
                elif inner.suffix == ".py" and not inner.stem.startswith("__"):
                    if inner.stem not in words:
                        problems.append(f"{name}{inner.name}: not named in {name}'s row")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("component", sorted(LAYERS))
def test_every_declared_layer_entry_exists(component):
    """LAYERS names only packages and modules the tree has (a moved room leaves no stale entry)."""
    assert (
        (ROOT / component).is_dir()
        or (ROOT / f"{component}.py").exists()
        or component == "_trainparity"
    )


def test_setup_ships_every_package():
    """setup.py lists its packages by name: a new subpackage left out would be missing from an
    installed trainparity (CI tests the installed copy)."""
    setup_text = (REPOSITORY / "setup.py").read_text(encoding="utf-8")
    listed = set(re.findall(r'"(trainparity(?:\.[a-z_]+)*)"', setup_text))
    packages = {
        ".".join(("trainparity", *path.parent.relative_to(SOURCE_ROOT).parts))
        for path in SOURCE_ROOT.rglob("__init__.py")
    }
    assert packages - listed == set()
