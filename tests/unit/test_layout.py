"""The package layout keeps its rules: no import cycles, nothing imports plugin.py, the
logic layers (checks, decide, evidence) import no pytest."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).parents[2] / "pytest_k3accept"


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG.parent).with_suffix("").as_posix().replace("/", ".")
        is_pkg = rel.endswith(".__init__")
        out[rel[:-9] if is_pkg else rel] = (f, is_pkg)
    return out


def _runtime_imports(tree: ast.AST) -> list[ast.AST]:
    """Every import statement, at module level or in a function, except under
    ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    found: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        deps: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                if node.level:
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for alias in node.names:
                    full = f"{mod}.{alias.name}"
                    deps.add(full if full in mods else mod)
            else:
                deps.update(a.name for a in node.names)  # type: ignore[attr-defined]
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_nothing_imports_the_plugin_module_and_logic_layers_import_no_pytest() -> None:
    graph = _graph()
    assert not [m for m, deps in graph.items() if "pytest_k3accept.plugin" in deps]
    for name, (path, _) in _modules().items():
        if name.split(".")[1:2] in (["checks"], ["decide"], ["evidence"]):
            tree = ast.parse(path.read_text())
            names = {a.name for n in _runtime_imports(tree) if isinstance(n, ast.Import)
                     for a in n.names}
            assert "pytest" not in names, name


IMPORT_EACH_FIRST = r'''
import importlib, pkgutil, sys
import pytest_k3accept
names = sorted(m.name for m in pkgutil.walk_packages(pytest_k3accept.__path__, "pytest_k3accept.")
               if not m.name.startswith(("pytest_k3accept.suites.", "pytest_k3accept.testbed.build")))
failed = []
for name in names:
    for loaded in [k for k in sys.modules if k.startswith("pytest_k3accept")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\n".join(failed))
print(f"imported {len(names)} modules, each first")
'''


def test_every_module_imports_when_it_is_imported_first() -> None:
    """A cycle through a package's ``__init__`` works in one import order and breaks in
    another (checks.slo imported first once failed on observe.load.profile's import of it):
    every module is imported first, in a clean module table, in one subprocess."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", IMPORT_EACH_FIRST], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("imported ") and lines[:-1] == [], out.stdout[-3000:]
