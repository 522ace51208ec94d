"""The layout's rules, read from the code's own imports (every import, those inside functions too):
which package may import which, the layers inside pipeline/, no cycle anywhere, and scripts/ on the
pipeline's public functions only. The layer map is docs/architecture.md's table, read here."""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from pipeline.variants import REPO_ROOT

pytestmark = pytest.mark.unit

IN_IMAGE = ("smoke", "ppo_bench", "rlhf_bench", "container")  # copied into the image; they never see pipeline/
OURS = ("common", *IN_IMAGE, "pipeline", "build", "scripts")

# pipeline/, bottom to top, as docs/architecture.md writes it (the one copy): a module imports its own
# layer or lower ones, never a higher one.
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


def layer_map() -> list[tuple[str, set[str]]]:
    text = ARCHITECTURE.read_text()
    table = text.split("<!-- layers: read by tests/unit/test_layers.py -->", 1)[1].split("<!-- /layers -->", 1)[0]
    rows = [line.split("|")[1:3] for line in table.strip().splitlines()[2:]]
    return [
        (name.strip(), {f"pipeline.{m}" if m != "pipeline" else m for m in re.findall(r"`([\w.]+)`", modules)})
        for name, modules in rows
    ]


PIPELINE_LAYERS = layer_map()
# What scripts/ may import from pipeline/: the functions build.py's commands use, and the data they pass.
PUBLIC = {
    "pipeline", "pipeline.errors", "pipeline.variants", "pipeline.statements", "pipeline.publish", "pipeline.registry",
    "pipeline.docker_env", "pipeline.html_report", "pipeline.push", "pipeline.hostprocs", "pipeline.records",
    "pipeline.signing",
}  # fmt: skip


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO_ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def sources() -> dict[str, Path]:
    files = [REPO_ROOT / "build.py", *REPO_ROOT.glob("scripts/*.py")]
    for package in ("common", *IN_IMAGE, "pipeline"):
        files += sorted((REPO_ROOT / package).rglob("*.py"))
    return {module_name(f): f for f in files}


MODULES = sources()


def imports(path: Path) -> list[tuple[str, bool, list[str]]]:
    """(module imported, at import time?, names imported from it) of every import statement in the file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body} | {
        id(n) for node in tree.body if isinstance(node, ast.If | ast.Try) for n in ast.walk(node)
    }  # module level, and inside a module-level `if TYPE_CHECKING:` or try
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, id(node) in top, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [alias.name for alias in node.names]
            submodules = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in MODULES]
            out.append((node.module, id(node) in top, names))
            out += [(sub, id(node) in top, []) for sub in submodules]
    return out


def edges() -> dict[str, list[tuple[str, bool, list[str]]]]:
    graph = defaultdict(list)
    for name, path in MODULES.items():
        for target, eager, names in imports(path):
            if target.split(".")[0] in OURS:
                graph[name].append((target, eager, names))
    return graph


GRAPH = edges()


def package(module: str) -> str:
    return module.split(".")[0]


def test_common_imports_nothing_of_the_project_but_itself():
    bad = [
        f"{m} -> {t}" for m, targets in GRAPH.items() if package(m) == "common" for t, _, _ in targets if package(t) != "common"
    ]
    assert bad == []


def test_in_image_code_imports_only_common_and_its_own_package_at_import_time_and_never_the_pipeline():
    bad = []
    for module, targets in GRAPH.items():
        if package(module) not in IN_IMAGE:
            continue
        for target, eager, _ in targets:
            if package(target) in ("pipeline", "build", "scripts"):
                bad.append(f"{module} -> {target} (the host's code)")
            elif eager and package(target) not in ("common", package(module)):
                bad.append(f"{module} -> {target} at import time")
    assert bad == []


def test_the_pipeline_imports_no_in_image_package():
    """pipeline/ shares code with the image through common/ only (smoke.checks' names are common.rules')."""
    bad = [
        f"{m} -> {t}" for m, targets in GRAPH.items() if package(m) == "pipeline" for t, _, _ in targets if package(t) in IN_IMAGE
    ]
    assert bad == []


def layer_of(module: str) -> int:
    return next(i for i, (_, members) in enumerate(PIPELINE_LAYERS) if module in members)


def test_every_pipeline_module_has_a_layer():
    listed = set().union(*(members for _, members in PIPELINE_LAYERS))
    actual = {m for m in MODULES if package(m) == "pipeline"}
    assert actual == listed, {"not listed": sorted(actual - listed), "gone": sorted(listed - actual)}


def test_no_pipeline_module_imports_from_a_layer_above_it():
    bad = []
    for module, targets in GRAPH.items():
        if package(module) != "pipeline":
            continue
        for target, _, _ in targets:
            if package(target) == "pipeline" and target in MODULES and layer_of(target) > layer_of(module):
                bad.append(
                    f"{module} ({PIPELINE_LAYERS[layer_of(module)][0]}) -> {target} ({PIPELINE_LAYERS[layer_of(target)][0]})"
                )
    assert bad == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), or a module importing itself."""
    index, low, stack, on, found = {}, {}, [], set(), []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_there_is_no_import_cycle_at_the_top_level_or_inside_a_package():
    modules = {m: {t for t, _, _ in targets if t in MODULES and t != m} for m, targets in GRAPH.items()}
    packages: dict[str, set[str]] = defaultdict(set)
    for m, targets in modules.items():
        packages[package(m)] |= {package(t) for t in targets if package(t) != package(m)}
    assert cycles(packages) == []
    # a package's __init__ is imported by each of its modules: an edge from it to them is no cycle of theirs
    inner = {m: {t for t in ts if not (MODULES[m].name == "__init__.py")} for m, ts in modules.items()}
    assert cycles(inner) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_scripts_use_the_pipelines_public_functions_only():
    bad = []
    for module, targets in GRAPH.items():
        if package(module) != "scripts":
            continue
        for target, _, names in targets:
            if package(target) == "pipeline" and target not in PUBLIC:
                bad.append(f"{module} -> {target} (not one of the modules build.py's commands use)")
            bad += [f"{module} -> {target}.{n} (private)" for n in names if n.startswith("_")]
    assert bad == []


def test_no_pipeline_function_takes_more_than_seven_parameters():
    """Stages pass records (request.Request, build_image.Build, records.Facts, ...), not keyword lists."""
    wide = []
    for name, path in MODULES.items():
        if package(name) != "pipeline":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                count = len(args.posonlyargs + args.args + args.kwonlyargs) + bool(args.vararg) + bool(args.kwarg)
                count -= bool(args.args) and args.args[0].arg in ("self", "cls")
                if count > 7:
                    wide.append(f"{name}.{node.name}: {count}")
    assert wide == []
