"""The package's modules import one another one way (leaves upwards), and none takes a
private name from another: read from the source with ast, no module is imported.

An import inside a function counts (a lazy import hides a circle; it does not remove
it); one under ``if TYPE_CHECKING:`` does not (it never runs). A module whose name
starts with an underscore (``_lib``) is the package's own and may be imported by any
module of it; a private *name* (``from .x import _y``, ``_y`` a function, class or
constant of ``x``) belongs to its module alone: a helper two modules need is public, in
a leaf module.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "mdloader"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every import statement that runs, type-checking blocks left out."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _imports_in(child))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _imports(node)


def _sibling_imports(package: Path, module: str) -> list:
    """(sibling module, name taken from it or None, line) for each of ``module``'s imports
    of the package's own modules, relative or absolute."""
    tree = ast.parse((package / f"{module}.py").read_text(), filename=f"{module}.py")
    found = []
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mdloader" and len(parts) > 1:
                    found.append((parts[1], None, node.lineno))
            continue
        if node.level > 1:
            raise AssertionError(f"{module}.py:{node.lineno}: an import from above the package")
        if node.level == 1:
            base = node.module
        elif node.module and node.module.split(".")[0] == "mdloader":
            base = ".".join(node.module.split(".")[1:]) or None
        else:
            continue  # another package
        for alias in node.names:
            if base is None:  # from . import x: x is a module of the package
                found.append((alias.name, None, node.lineno))
            else:
                found.append((base.split(".")[0], alias.name, node.lineno))
    return found


GRAPH = {m: _sibling_imports(PACKAGE, m) for m in MODULES}


def test_every_import_names_a_module_of_the_package():
    for module, imports in GRAPH.items():
        for target, _, line in imports:
            assert target in MODULES, f"{module}.py:{line} imports {target}, which is not a module of mdloader"


def test_no_private_name_crosses_modules():
    taken = [f"{module}.py:{line}: from .{target} import {name}"
             for module, imports in GRAPH.items() for target, name, line in imports
             if name is not None and name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
             and name not in MODULES]
    assert not taken, "private names imported from another module (make them public, in a leaf module):\n" + \
        "\n".join(taken)


def test_no_import_circle():
    edges = {m: sorted({t for t, _, _ in imports if t != m}) for m, imports in GRAPH.items()}
    done, path = set(), []

    def visit(module):
        if module in path:
            circle = path[path.index(module):] + [module]
            raise AssertionError("import circle: " + " -> ".join(circle))
        if module in done:
            return
        path.append(module)
        for target in edges.get(module, []):
            visit(target)
        path.pop()
        done.add(module)

    for module in MODULES:
        visit(module)


def test_the_checks_see_what_they_look_for(tmp_path):
    """The graph is read as the tests above assume: loader imports its leaves and data,
    typed and data no longer import loader (the circle that was), a lazy import counts
    and a type-checking one does not."""
    assert {"errors", "args", "batch", "data", "typed"} <= {t for t, _, _ in GRAPH["loader"]}
    assert "loader" not in {t for t, _, _ in GRAPH["typed"]}
    assert "loader" not in {t for t, _, _ in GRAPH["data"]}
    (tmp_path / "m.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .z import Z\n"
                                   "def f():\n    from .x import _y\n")
    assert _sibling_imports(tmp_path, "m") == [("x", "_y", 5)]
