"""House style rule 1: layers point inward. A module imports only from its own layer or below.

cli -> loop/report/view/track -> exec -> harness/sandbox/models/train -> store -> core (view may import report)
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "rsi"

RANK = {
    "core": 0,
    "store": 1,
    "sandbox": 2,
    "models": 2,
    "train": 2,
    "harness": 3,  # the harness drives a sandbox with a model
    "exec": 4,
    "report": 5,
    "loop": 5,
    "view": 5,
    "track": 5,  # trackers (MLflow, TensorBoard, W&B): fed plain data by the CLI at phase boundaries
    "cli": 6,
}
# report reads from loop's outputs and loop renders nothing, so they may not import each other
FORBIDDEN = {("loop", "report"), ("report", "loop"), ("view", "loop"), ("loop", "view"), ("report", "view")}
# the viewer renders the report's own templates and diff (rsi view's Diff page is `rsi diff --format html`)
ALLOWED = {("view", "report")}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rsi."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("rsi."):
                    out.add(a.name.split(".")[1])
    return out


def test_every_import_points_inward() -> None:
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if len(rel.parts) < 2 or rel.parts[0] not in RANK:
            continue
        layer = rel.parts[0]
        for dep in _imports(path):
            if dep not in RANK or dep == layer:
                continue
            if (layer, dep) in ALLOWED:
                continue
            if RANK[dep] > RANK[layer] or (RANK[dep] == RANK[layer]) or (layer, dep) in FORBIDDEN:
                bad.append(f"{rel} imports rsi.{dep}")
    assert bad == []


def test_core_does_no_io() -> None:
    io_modules = {"os", "subprocess", "socket", "httpx", "docker", "sqlite3", "shutil", "sqlmodel", "sqlalchemy"}
    bad = []
    for path in sorted((PKG / "core").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            bad += [f"{path.name} imports {n}" for n in names if n in io_modules]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                bad.append(f"{path.name} calls open()")
    assert bad == []


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """rsi modules `path` imports anywhere (function-level imports included: they cycle too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rsi"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("rsi")]
        out |= {n for n in names if n in known}
    return out


def test_no_import_cycles_between_modules() -> None:
    # Within a layer too: rsi/loop/context.py <-> rsi/loop/workspace.py was one (patched around).
    paths = {_module_name(p): p for p in PKG.rglob("*.py")}
    known = set(paths)
    graph = {m: _module_imports(p, known) - {m} for m, p in paths.items()}
    for pkg in list(graph):  # importing a package runs its __init__, not its children
        graph[pkg] = {d for d in graph[pkg] if not pkg.startswith(d + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
