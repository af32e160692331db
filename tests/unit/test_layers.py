"""docs/architecture.md's layer order, held against the real imports: a module imports only from its own
layer or the layers below."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "orchestrator"
LAYER = {"cli": 9, "watching": 8, "bench": 8, "maintenance": 8, "deploy": 7, "setup": 7, "model": 7, "operation": 6,
         "preflight": 6, "acceptance": 6, "releases": 5, "window": 5, "facts": 5, "docker_cli": 4, "runner": 4, "export": 4, "checks": 4, "transport": 3, "render": 3,
         "config": 2, "http_api": 2,
         "bugs": 2}


def _package(module: str) -> str:
    return module.split(".")[0]


def _imports(path: Path) -> list[str]:
    """Every `orchestrator.X...` a file imports, as `X.rest` (relative imports resolved)."""
    rel = path.relative_to(ROOT).with_suffix("")
    here = list(rel.parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("orchestrator."):
                target = node.module.removeprefix("orchestrator.")
            else:
                continue
            found += [f"{target}.{a.name}".lstrip(".") for a in node.names]  # a name may be a module
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
