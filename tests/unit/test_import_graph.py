"""Imports point down: pbd's packages in declared layers, and no import cycle among pbd,
pbd_wire and pbd_worker modules; type-checking imports included.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``,
wherever it stands (module level, under ``if TYPE_CHECKING:``, inside a function). ``from
pkg import name`` counts as an import of ``pkg.name`` when that is a module, else of ``pkg``.
Importing ``a.b.c`` runs the packages ``a`` and ``a.b`` first; their ``__init__`` modules are
nodes too, so a package whose ``__init__`` imports a module that imports the package back
is a cycle as well.

``LAYERS`` names every package (and top-level module) of pbd, bottom first. A module may
import modules of its own package and of lower layers; an import of a package in its own
layer or a higher one fails the test, even when it makes no cycle (yet).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"pbd": ROOT / "service", "pbd_wire": ROOT / "workers", "pbd_worker": ROOT / "workers"}

# Bottom first. Packages in one layer do not import each other.
LAYERS: list[tuple[str, ...]] = [
    # The wire, one implementation for both sides; the worker, which imports only the wire.
    ("pbd_wire",),
    ("pbd_worker",),
    # Writes held to the end of a block of work (the HTTP/2 connections' and the links').
    ("pbd.corks",),
    # Records and leaves: anyone may import them.
    (
        "pbd",
        "pbd._proto",
        "pbd.errors",
        "pbd.gpus",
        "pbd.h2",
        "pbd.histogram",
        "pbd.peercred",
        "pbd.restrictions",
        "pbd.stop_signals",
    ),
    ("pbd.memory",),
    ("pbd.types", "pbd.stats", "pbd.modelconfig"),
    (
        "pbd.responses",
        "pbd.tracing",
        "pbd.execenv",
        "pbd.admission",
        "pbd.validation",
        "pbd.scheduling",
        "pbd.cache",
    ),  # fmt: skip
    ("pbd.settings", "pbd.inference_plane"),
    # Settings as the daemon's log and Triton's command line put them; the sockets they name.
    ("pbd.logsettings", "pbd.triton_flags", "pbd.listeners"),
    # What the edges' other routes need of the daemon (the dataplane is its implementation).
    ("pbd.control_plane",),
    # A worker process (launched, connected); one model instance in it; one model version
    # (its instances, queue and dispatch); then the repository of models over them.
    # The caller's half of the worker protocol, for every process that sends requests to
    # workers (the daemon's instances, a front end's direct path).
    ("pbd.worker", "pbd.worker_client"),
    ("pbd.instance", "pbd.systemd"),
    ("pbd.version",),
    ("pbd.repository",),
    # What every RPC does, over the repository; the calls that re-enter it (BLS, ensembles)
    # and what reads it (metrics, the status line).
    ("pbd.dataplane",),
    ("pbd.bls", "pbd.ensemble", "pbd.metrics", "pbd.status_line"),
    # The edges: they answer requests through the dataplane (``pbd.answer``: how).
    ("pbd.answer",),
    ("pbd.grpc", "pbd.http"),
    # Front-end processes (--frontends): the edges in processes of their own, and the
    # daemon's side of them.
    ("pbd.fronts",),
    ("pbd.daemon",),
    ("pbd.cli",),
    ("pbd.__main__",),
]


def _modules() -> dict[str, Path]:
    found = {}
    for top, base in SOURCES.items():
        for path in (base / top).rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, node, is_package)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else base)
        for target in targets:
            # Importing a.b.c runs a and a.b first (but a module does not depend on the
            # packages that contain it through this rule: they are its parents, not imports).
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                dotted = ".".join(parts[:i])
                if dotted in modules and dotted != name and not name.startswith(dotted + "."):
                    graph[name].add(dotted)
    return graph


# The edges (gRPC with its HTTP/2, HTTP) reach the daemon only through the dataplane's
# methods, and otherwise import records and their own helpers: they are to run in front-end
# processes of their own, over a DataPlane interface.
EDGES = ("pbd.grpc", "pbd.http", "pbd.h2")
EDGES_MAY_IMPORT = (
    *EDGES,
    "pbd",
    "pbd._proto",
    "pbd.corks",  # writes held to the end of a read, whatever connection they are for
    "pbd.errors",
    "pbd.types",
    "pbd.modelconfig",
    "pbd.responses",
    "pbd.settings",
    "pbd.logsettings",
    "pbd.tracing",
    "pbd.answer",
    "pbd.inference_plane",  # what the inference routes need of the daemon, wherever it is
    "pbd.control_plane",  # what the other routes need of it (the daemon's DataPlane)
    "pbd.listeners",  # the public sockets, bound once
    "pbd.restrictions",  # the API groups a header guards, on either binding
    "pbd_wire",
)


def layer_of(module: str) -> tuple[str, int]:
    """The declared package (or module) ``module`` belongs to, and its layer's index. A unit
    that holds other units (``pbd``) is only its own ``__init__``."""
    units = [unit for layer in LAYERS for unit in layer]
    for index, layer in enumerate(LAYERS):
        for unit in layer:
            holds_units = any(other.startswith(unit + ".") for other in units)
            if module == unit or (module.startswith(unit + ".") and not holds_units):
                return unit, index
    return "", -1


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module in the importer's own layer (another package) or above."""
    found = []
    for name, targets in sorted(graph.items()):
        unit, level = layer_of(name)
        for target in sorted(targets):
            if any(other.startswith(target + ".") for other in targets):
                continue  # the package of a module imported: that import is reported
            target_unit, target_level = layer_of(target)
            if target_unit != unit and target_level >= level:
                found.append(f"{name} ({unit}) -> {target} ({target_unit})")
    return found


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_type_only_loop() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_package_has_a_layer() -> None:
    unplaced = sorted(name for name in import_graph() if layer_of(name)[1] < 0)
    assert not unplaced, "modules of no layer in LAYERS: " + ", ".join(unplaced)


def test_imports_point_down() -> None:
    found = upward_imports(import_graph())
    assert not found, "imports that do not point down (see LAYERS):\n" + "\n".join(found)


def test_the_layer_check_finds_an_import_up_and_one_across() -> None:
    graph = {
        "pbd.errors": {"pbd.types"},  # up
        "pbd.stats": {"pbd.modelconfig.model", "pbd.errors"},  # across, then down
        "pbd.modelconfig.parse": {"pbd.modelconfig.model"},  # inside its own package
    }
    assert upward_imports(graph) == [
        "pbd.errors (pbd.errors) -> pbd.types (pbd.types)",
        "pbd.stats (pbd.stats) -> pbd.modelconfig.model (pbd.modelconfig)",
    ]
    assert layer_of("pbd") == ("pbd", 3)
    assert layer_of("pbd.somewhere_new.module") == ("", -1)  # not under ``pbd``'s own layer


# A front-end process runs the edges and the direct path; the daemon's data plane (its
# repository, versions, instances, queues, worker processes, BLS, ensembles, cache,
# metrics) stays out of it: what it needs of the daemon comes over its link.
FRONT_END_PROCESS = "pbd.fronts.front"
FRONT_END_MAY_NOT_IMPORT = (
    "pbd.dataplane",
    "pbd.repository",
    "pbd.version",
    "pbd.instance",
    "pbd.scheduling",
    "pbd.worker",
    "pbd.systemd",
    "pbd.bls",
    "pbd.ensemble",
    "pbd.cache",
    "pbd.metrics",
    "pbd.status_line",
    "pbd.daemon",
)


def imported_by(graph: dict[str, set[str]], root: str) -> dict[str, str]:
    """Every module ``root`` imports, directly or not, with the module that imports it."""
    seen: dict[str, str] = {}
    stack = [root]
    while stack:
        module = stack.pop()
        for target in graph.get(module, ()):
            if target not in seen and target != root:
                seen[target] = module
                stack.append(target)
    return seen


def test_a_front_end_process_imports_none_of_the_daemons_data_plane() -> None:
    imported = imported_by(import_graph(), FRONT_END_PROCESS)
    found = []
    for module, importer in sorted(imported.items()):
        if layer_of(module)[0] in FRONT_END_MAY_NOT_IMPORT:
            chain = [module, importer]
            while chain[-1] in imported:
                chain.append(imported[chain[-1]])
            found.append(" <- ".join(chain))
    assert not found, "the front-end process imports the daemon's data plane:\n" + "\n".join(
        found
    )


def test_the_front_end_check_finds_an_import_through_an_edge() -> None:
    graph = {
        FRONT_END_PROCESS: {"pbd.grpc.server"},
        "pbd.grpc.server": {"pbd.dataplane"},
        "pbd.dataplane": {"pbd.instance.instance"},
    }
    imported = imported_by(graph, FRONT_END_PROCESS)
    assert imported == {
        "pbd.grpc.server": FRONT_END_PROCESS,
        "pbd.dataplane": "pbd.grpc.server",
        "pbd.instance.instance": "pbd.dataplane",
    }
    assert {layer_of(m)[0] for m in imported} & set(FRONT_END_MAY_NOT_IMPORT) == {
        "pbd.dataplane",
        "pbd.instance",
    }


def test_the_edges_reach_the_daemon_only_through_the_dataplane() -> None:
    found = [
        f"{name} -> {target}"
        for name, targets in sorted(import_graph().items())
        if layer_of(name)[0] in EDGES
        for target in sorted(targets)
        if layer_of(target)[0] not in EDGES_MAY_IMPORT
    ]
    assert not found, "edge imports past the dataplane (see EDGES_MAY_IMPORT):\n" + "\n".join(found)


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)
