"""The layer contract of ``src/countboard`` (docs/architecture.md): imports point down the layers, never up, no cycles.

Every ``import`` of a ``countboard`` module anywhere in a module (top level or inside a function) counts, except
those under ``if TYPE_CHECKING:`` (annotations only); ``from countboard.tracking import store`` is an import of the
module ``countboard.tracking.store`` (not of the package), so a cycle through such an import is seen. A module may
import its own package, any package of a lower layer, and, among the domain packages, only the pairs listed in
``DOMAIN_DEPENDS``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "countboard"

#: Layers from the bottom up; a name is a top-level module or package of ``countboard``.
LAYERS = [
    {"__init__", "errors", "paths", "items", "decode", "results", "resources", "schema", "fingerprint", "config", "fit",
     "protocol", "inputs", "batching", "quiet", "processes", "preflight", "escaping"},  # core
    {"metrics", "quantify", "models", "tracking"},  # shared building blocks
    {"counting", "numeracy", "grounding", "acs"},  # one package per paper's protocol
    {"cell", "engine", "index", "publish"},  # orchestration: cell ownership, jobs, the index, its publication
    {"commands", "cli"},  # entry points
]
#: Domain packages that may import another domain (the synthetic shapes of ``counting`` draw images for both).
DOMAIN_DEPENDS = {"numeracy": {"counting"}, "grounding": {"counting"}}
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    return skip


def _is_module(name: str, root: Path) -> bool:
    """Whether ``name`` (dotted) is a module or package under ``root`` (the folder holding ``countboard/``)."""
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path, root: Path = SRC.parent, annotations: bool = False) -> set[str]:
    """``countboard`` modules imported by the file at ``path`` (outside ``TYPE_CHECKING`` blocks unless
    ``annotations``); a name imported from a package that is a module of it (``from countboard.tracking import
    store``) counts as that module."""
    tree = ast.parse(path.read_text())
    skip = set() if annotations else _type_checking_nodes(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}", root) else node.module
                     for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n == "countboard" or n.startswith("countboard."))
    return found


def module_graph(src: Path = SRC, annotations: bool = False) -> dict[str, set[str]]:
    graph = {}
    for path in src.rglob("*.py"):
        module = ".".join(("countboard", *path.relative_to(src).with_suffix("").parts))
        graph[module.removesuffix(".__init__")] = imports_of(path, src.parent, annotations)
    return graph


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, deps in sorted(graph.items()):
        src = _top(module)
        for dep in sorted(deps):
            dst = _top(dep)
            if dst == src or dst not in LAYER_OF or src not in LAYER_OF:
                if src not in LAYER_OF or dst not in LAYER_OF:
                    out.append(f"{module} -> {dep}: package not placed in a layer (tests/test_layers.py LAYERS)")
                continue
            up = LAYER_OF[dst] > LAYER_OF[src]
            sideways_domain = (LAYER_OF[dst] == LAYER_OF[src] == 2 and dst not in DOMAIN_DEPENDS.get(src, set()))
            if up or sideways_domain:
                out.append(f"{module} -> {dep}: {src} (layer {LAYER_OF[src]}) may not import {dst} "
                           f"(layer {LAYER_OF[dst]})")
    return out


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles among modules (a module importing itself through others), found by depth-first search."""
    known = set(graph)
    edges = defaultdict(set)
    for module, deps in graph.items():
        for dep in deps:
            target = dep if dep in known else dep.rsplit(".", 1)[0]
            if target in known and target != module and not module.startswith(target + "."):
                edges[module].add(target)
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(known):
        if node not in state:
            visit(node, [])
    return cycles


def test_every_package_has_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
            if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert tops - set(LAYER_OF) == set(), "place new packages in LAYERS (and in docs/architecture.md)"


def test_imports_point_down_the_layers():
    assert violations(module_graph()) == []


def test_no_import_cycles():
    assert package_cycles(module_graph()) == []


def test_annotations_point_down_too():
    """Type-only imports do not run, but an annotation naming a type of a higher layer is the same arrow up: the
    types models and tasks share live in ``items.py``."""
    graph = module_graph(annotations=True)
    assert violations(graph) == [] and package_cycles(graph) == []


@pytest.mark.parametrize("bad", [
    ("countboard.tracking.store", "countboard.engine"),  # shared layer importing orchestration
    ("countboard.counting.tasks.praco", "countboard.numeracy.scoring"),  # a domain importing an unrelated domain
    ("countboard.metrics.counting", "countboard.commands.index"),
])
def test_the_contract_catches_an_upward_import(bad):
    module, dep = bad
    graph = module_graph()
    graph[module] = graph.get(module, set()) | {dep}
    assert any(v.startswith(f"{module} -> {dep}") for v in violations(graph))


def test_the_cycle_check_catches_a_cycle():
    graph = {"countboard.a.x": {"countboard.a.y"}, "countboard.a.y": {"countboard.a.z"},
             "countboard.a.z": {"countboard.a.x"}}
    assert package_cycles(graph) == [["countboard.a.x", "countboard.a.y", "countboard.a.z", "countboard.a.x"]]


def test_type_checking_imports_are_not_counted(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from countboard.engine import x\n"
                 "from countboard.errors import ConfigError\n")
    assert imports_of(f) == {"countboard.errors"}


def test_from_package_import_module_counts_as_that_module(tmp_path):
    pkg = tmp_path / "countboard" / "p"
    pkg.mkdir(parents=True)
    (tmp_path / "countboard" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    (pkg / "a.py").write_text("from countboard.p import b, VALUE\n")
    (pkg / "b.py").write_text("def f():\n    from countboard.p import a\n")
    assert imports_of(pkg / "a.py", tmp_path) == {"countboard.p.b", "countboard.p"}
    graph = module_graph(tmp_path / "countboard")
    assert package_cycles(graph) == [["countboard.p.a", "countboard.p.b", "countboard.p.a"]]
