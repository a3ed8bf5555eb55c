"""No import cycle in src/stable_rl: the package's modules import each other in one direction.

The graph: one node per module (a package is its ``__init__``); an edge for every ``import`` or ``from ...
import`` of a stable_rl module, absolute or relative, wherever it stands in the file (a function's deferred
import included: deferring an import hides a cycle, it does not remove it), except under ``if TYPE_CHECKING:``
(annotations only, never run). ``from a import b`` is an edge to the module ``a.b`` where there is one, else to
``a``. Importing ``a.b`` also runs ``a``'s ``__init__``; those implicit edges are left out, as a package's own
``__init__`` re-exporting its modules would otherwise count as a cycle with each of them.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` under ``src``."""
    files = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import and ImportFrom node, those under ``if TYPE_CHECKING:`` left out (its ``else`` kept)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]))
            continue
        yield from _imports(node)


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (see the module docstring for the rules)."""
    files = module_files(src, package)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = own_package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            origin = ".".join(p for p in (base if node.level else "", node.module or "") if p)
            for alias in node.names:
                submodule = f"{origin}.{alias.name}"
                targets.add(submodule if submodule in files else origin)
        graph[name] = {target for target in targets if target in files and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph[node]):
            if (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if (cycle := visit(node)) is not None:
            return cycle
    return None


def test_stable_rl_has_no_import_cycle():
    graph = import_graph(SRC, "stable_rl")
    assert len(graph) > 80 and "stable_rl.rl.module" in graph["stable_rl.rl"]  # the whole package was read
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_a_deferred_relative_import_is_found_and_named(tmp_path):
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/report.py": "def main():\n    from .sub.frontier import frontier\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/frontier.py": "from pkg import report\n\ndef frontier():\n    pass\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.report"] == {"pkg.sub.frontier"} and graph["pkg.sub.frontier"] == {"pkg.report"}
    assert find_cycle(graph) == ["pkg.report", "pkg.sub.frontier", "pkg.report"]


def test_type_checking_imports_and_a_package_reexporting_its_modules_are_no_cycle(tmp_path):
    write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\nfrom pkg.b import B\n",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\nclass A: ...\n",
            "pkg/b.py": "import pkg.a\nfrom . import a\nclass B: ...\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"pkg": {"pkg.a", "pkg.b"}, "pkg.a": set(), "pkg.b": {"pkg.a"}}
    assert find_cycle(graph) is None
