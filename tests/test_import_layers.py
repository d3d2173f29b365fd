"""The package's two tiers and its import graph, read from the sources.

The rule (docs/design.md, "Two tiers"): a module is private exactly when a
component of its dotted path starts with `_`; every line of code lives in
the private package `trainparity._internal` (and the native core
`trainparity._trainparity`). A public module is a face: it re-exports, or
hands out names on first use, and defines nothing. PUBLIC lists the public
modules; docs/api.md documents each.

Inside `_internal`, the layer order is declared once, here (LAYERS): the
surface (command line, pytest, integrations); the checks, one wing each; the
processes layer and the packages beside it; cases; state and comparison;
reports; the native core; the foundation modules that everything may use.
docs/design.md draws the same order, and a test below holds its layer block
to LAYERS and to the tree. Imports inside functions count like any other,
and so does `from trainparity import name` when `name` is a module. No
private module imports a public one: internal code names a module's home.
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
PRIVATE_ROOT = ROOT / "_internal"
PRIVATE = "trainparity._internal"
DESIGN_DOC = REPOSITORY / "docs" / "design.md"
API_DOC = REPOSITORY / "docs" / "api.md"

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

# The first component below `trainparity._internal`, and the layer it lives in.
LAYERS = {
    "cli": SURFACE,
    "testing": SURFACE,
    "pytest_plugin": SURFACE,
    "integrations": SURFACE,
    "resume": CHECKS,
    "runs": CHECKS,
    # "Why two runs part" is one room serving several layers: explain and its reruns are a
    # check; the op tracer is used by record() (processes); the likely cause ranks a state's
    # differences; leads and hints are plain facts anyone reads.
    "why": CHECKS,
    "why.forensics": PROCESSES,
    "why.likely_cause": STATE,
    "why.environment_leads": FOUNDATION,
    "accumulation": CHECKS,
    "coverage": CHECKS,
    "crashes": CHECKS,
    "processes": PROCESSES,
    "distributed": PROCESSES,
    "recording": PROCESSES,
    # Executors run the phases elsewhere (SLURM, a plan's replay): beside processes/, whose
    # seam (processes/executor.py) they implement; only the checks and the CLI choose one.
    "executors": PROCESSES,
    "cases": CASES,
    "checkpoints": CASES,
    "state": STATE,
    "comparison": STATE,
    # The noise envelope is one room (measure a step, walk the steps, word the verdict) that
    # recording/diff.py and the checks both use, so it sits where its lowest user can reach
    # it. It builds on comparison/, where NoiseComparison stands beside the other policies.
    "noise": STATE,
    "reports": REPORTS,
    "native": NATIVE,
    "environment": FOUNDATION,
    "error_text": FOUNDATION,
    "lazy_names": FOUNDATION,
    "outcomes": FOUNDATION,
    "protocols": FOUNDATION,
    "version": FOUNDATION,
}

# The public tier: the front door, the contract's module paths, and the documented
# subpackages users import from. Nothing else may be public.
PUBLIC = frozenset(
    {
        "trainparity",
        "trainparity.__main__",
        "trainparity.api",
        "trainparity.accumulation",
        "trainparity.comparison",
        "trainparity.importing",
        "trainparity.outcomes",
        "trainparity.process_resume",
        "trainparity.protocols",
        "trainparity.results",
        "trainparity.sample_coverage",
        "trainparity.snapshot",
        "trainparity.state",
        "trainparity.version",
        "trainparity.testing",
        "trainparity.pytest_plugin",
        "trainparity.checkpoints",
        "trainparity.distributed",
        "trainparity.executors",
        "trainparity.integrations",
        "trainparity.integrations.accelerate",
        "trainparity.integrations.deepspeed",
        "trainparity.integrations.huggingface",
        "trainparity.integrations.lightning",
    }
)


def is_private(module: str) -> bool:
    return any(part.startswith("_") and part != "__main__" for part in module.split(".")[1:])


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
    if not is_private(module):
        return SURFACE
    if module == "trainparity._trainparity":
        return NATIVE
    if module == PRIVATE:
        return FOUNDATION  # the private package's own __init__ imports nothing
    entry = layer_entry(module)
    assert entry is not None, f"{module}: give its package a layer in tests/test_import_layers.py"
    return LAYERS[entry]


def layer_entry(module: str) -> str | None:
    """The LAYERS entry that places a private module below `_internal`, or None.

    A room that serves several layers (one concept, e.g. the "why" room) declares
    its modules one by one ("room.module"); the most specific entry wins.
    """
    parts = module.split(".")[2:]
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in LAYERS:
            return key
    return None


def test_the_graph_is_read_from_the_real_sources():
    graph = import_graph()
    assert len(graph) > 80
    assert "trainparity._internal.resume.execution" in graph["trainparity._internal.resume.check"]
    # An import inside a function counts.
    assert (
        "trainparity._internal.why.forensics.step_trace"
        in graph["trainparity._internal.recording.recorder"]
    )


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
        "trainparity._internal.native.core": {"trainparity._internal.resume.check"},
        "trainparity._internal.state.freeze": {
            "trainparity._internal.processes.group",
            "trainparity._internal.native.core",
        },
    }
    assert upward_imports(graph) == [
        "trainparity._internal.native.core (native) -> trainparity._internal.resume.check (checks)",
        "trainparity._internal.state.freeze (state) -> trainparity._internal.processes.group (processes)",
    ]


def test_no_two_packages_import_each_other():
    """Between two subpackages (wings, layers, the packages beside them) arrows run one way only.

    Faces count too: a face kept inside a package (distributed/ids_audit.py) ties
    that package to its home's, so the home's package must not import it back.
    """

    def package(module: str) -> str:
        """The unit LAYERS places `module` by: its package, or its own entry in a room that
        declares its modules one by one."""
        if not is_private(module):
            return "public"
        entry = layer_entry(module)
        if entry is not None and "." in entry:
            return entry
        parts = module.split(".")
        return parts[2] if len(parts) > 3 else module

    ties = {
        (package(module), package(target))
        for module, targets in import_graph().items()
        for target in targets
        if package(module) != package(target)
    }
    both_ways = sorted(f"{a} <-> {b}" for a, b in ties if (b, a) in ties and a < b)
    assert both_ways == [], "\n".join(both_ways)


def public_modules() -> set[str]:
    return {module for module in module_files() if not is_private(module)}


def test_the_public_tier_is_exactly_the_declared_list():
    """A new public module is a decision (PUBLIC and docs/api.md), never the side effect of a move."""
    assert public_modules() == PUBLIC


def test_every_public_module_is_in_the_api_doc():
    documented = API_DOC.read_text(encoding="utf-8")
    missing = sorted(
        m for m in PUBLIC if m != "trainparity.__main__" and f"`{m}`" not in documented
    )
    assert missing == [], missing


def test_no_private_module_imports_a_public_one():
    through_faces = [
        f"{module} -> {target}"
        for module, targets in sorted(import_graph().items())
        if is_private(module)
        for target in sorted(targets)
        if not is_private(target)
    ]
    assert through_faces == [], "\n".join(through_faces)


def test_public_modules_define_nothing():
    """A face re-exports or loads names on first use; a def or a class belongs in _internal."""
    problems = []
    for module in sorted(public_modules()):
        tree = ast.parse(module_files()[module].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                problems.append(f"{module}: defines {getattr(node, 'name', 'a lambda')}")
            if isinstance(node, ast.Import) or (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("trainparity")
                and not node.module.startswith(PRIVATE)
                and node.module not in ("trainparity",)
            ):
                problems.append(
                    f"{module}: imports {ast.unparse(node)} (a face imports from _internal)"
                )
    assert problems == [], "\n".join(problems)


def test_workers_never_import_their_orchestrators():
    graph = import_graph()

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for target in graph.get(todo.pop(), set()) - seen:
                seen.add(target)
                todo.append(target)
        return seen

    assert "trainparity._internal.accumulation.check" not in reachable(
        "trainparity._internal.accumulation.worker"
    )
    assert "trainparity._internal.accumulation.execution" not in reachable(
        "trainparity._internal.accumulation.worker"
    )
    assert "trainparity._internal.accumulation.rank_orchestration" not in reachable(
        "trainparity._internal.accumulation.worker"
    )
    # The observer worker is launched as `python -m trainparity._internal.processes.observer`: the package
    # (importing nothing), then its __main__, which runs the worker.
    assert graph["trainparity._internal.processes.observer"] == set()
    assert "trainparity._internal.processes.observer.snapshot_service" in reachable(
        "trainparity._internal.processes.observer.__main__"
    )
    for start in (
        "trainparity._internal.processes.observer.__main__",
        "trainparity._internal.processes.observer.snapshot_service",
    ):
        assert "trainparity._internal.processes.observer.client" not in reachable(start)
    # The packages the worker is launched from import nothing; the public face hands out the
    # check's names only on first use, through a helper that imports nothing of trainparity's.
    assert graph[PRIVATE] == set()
    assert graph["trainparity._internal.accumulation"] == set()
    assert graph["trainparity.accumulation"] == {"trainparity._internal.lazy_names"}
    assert graph["trainparity._internal.lazy_names"] == set()


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
    for path in sorted(PRIVATE_ROOT.iterdir()):
        if path.name.startswith(("_", ".")):
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            name, layer = f"{path.name}/", LAYERS[path.name]
        elif path.suffix == ".py":
            name, layer = path.stem, LAYERS[path.stem]
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
    path = PRIVATE_ROOT.joinpath(*component.split("."))
    assert path.is_dir() or path.with_suffix(".py").exists()


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
