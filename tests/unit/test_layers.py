"""docs/architecture.md's layer order, held against the real imports, with no exceptions: a module imports
only from its own layer or the layers below; nothing outside preflight imports its judges (checks_*: the
facts they judge are in facts/); and no import inside a function hides a circle between modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "orchestrator"
LAYER = {"cli": 9, "watching": 8, "bench": 8, "maintenance": 8, "deploy": 7, "setup": 7, "model": 7, "operation": 6,
         "preflight": 6, "acceptance": 6, "releases": 5, "window": 5, "fabric": 5, "facts": 5, "docker_cli": 4, "runner": 4,
         "export": 4, "checks": 4, "transport": 3, "render": 3, "config": 2, "http_api": 2, "bugs": 2,
         "interrupts": 2, "verbosity": 2, "vllm_table": 1}


def _package(module: str) -> str:
    return module.split(".")[0]


def _targets(path: Path, node: ast.ImportFrom) -> list[str]:
    """What one `from ... import ...` names, as `X.rest` (relative imports resolved); [] outside orchestrator."""
    here = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    if node.level:
        base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
        target = ".".join(base + ([node.module] if node.module else []))
    elif node.module and node.module.startswith("orchestrator."):
        target = node.module.removeprefix("orchestrator.")
    else:
        return []
    return [f"{target}.{a.name}".lstrip(".") for a in node.names]  # a name may be a module


def _imports(path: Path) -> list[str]:
    """Every `orchestrator.X...` a file imports, as `X.rest` (relative imports resolved)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found += _targets(path, node)
    return found


def test_no_module_imports_from_a_layer_above_its_own():
    wrong = []
    for path in ROOT.rglob("*.py"):
        mine = _package(str(path.relative_to(ROOT)).replace("/", ".").removesuffix(".py"))
        if mine not in LAYER:
            continue  # sim/ and the package root
        for target in _imports(path):
            theirs = _package(target)
            if theirs in LAYER and LAYER[theirs] > LAYER[mine]:
                wrong.append(f"{path.relative_to(ROOT)} imports {target} ({theirs} is above {mine})")
    assert not wrong, "\n".join(wrong)


def test_the_product_does_not_import_the_simulator_outside_its_commands():
    users = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
             if not str(p.relative_to(ROOT)).startswith("sim/")
             and any(_package(t) == "sim" for t in _imports(p))]
    assert sorted(users) == ["cli/demo.py", "cli/sim.py"], users


def test_nothing_outside_preflight_imports_its_judges():
    """preflight/checks_* hold judges only: a type, parser or script anyone else needs is a fact (facts/)."""
    wrong = [f"{path.relative_to(ROOT)} imports {target}" for path in ROOT.rglob("*.py")
             if path.relative_to(ROOT).parts[0] != "preflight"
             for target in _imports(path) if target.startswith("preflight.checks_")]
    assert not wrong, "\n".join(wrong)


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per module, the modules it imports at load time and those it imports only inside a function (a
    `TYPE_CHECKING` block is never run, so it is neither)."""
    files = {_module(p): p for p in ROOT.rglob("*.py")}

    def module_of(target: str) -> str | None:
        while target and target not in files:
            target = target.rpartition(".")[0]
        return target or None

    top: dict[str, set[str]] = {m: set() for m in files}
    inner: dict[str, set[str]] = {m: set() for m in files}

    def walk(mod: str, node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                found = {module_of(t) for t in _targets(files[mod], child)} - {None, mod}
                (inner if in_function else top)[mod].update(found)
            walk(mod, child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    for mod, path in files.items():
        walk(mod, ast.parse(path.read_text()), False)
    return top, inner


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        here = todo.pop()
        if here == goal:
            return True
        if here not in seen:
            seen.add(here)
            todo += graph.get(here, ())
    return False


def test_no_import_inside_a_function_hides_a_circle():
    """An import put inside a function so that two modules can import each other is a circle all the same:
    the shared piece belongs in a module below both."""
    top, inner = _graph()
    both = {m: top[m] | inner[m] for m in top}
    circles = [f"{mod} imports {target} inside a function, and {target} imports {mod}"
               for mod, targets in inner.items() for target in sorted(targets - top[mod])
               if _reaches(both, target, mod)]
    assert not circles, "\n".join(circles)
