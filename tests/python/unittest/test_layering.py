"""The package's modules talk through named interfaces: no import cycles, lazy imports inside functions
included, and no private (``_name``) module attribute imported or read from another module of the package.

Read from the source tree with ``ast``: what is checked is the code as written, not what happened to run.
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[3] / "python" / "mxnet" / "amp"
#: The one private module others may import: the only module that loads the C++ library (house style).
PRIVATE_MODULES = {"_ext"}


def _module_name(path):
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules():
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _relative_imports(path):
    """``(lineno, target module, imported names)`` of every relative import inside the package, anywhere in
    the file (module level or inside functions)."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        if node.level - 1 > len(package):
            continue  # from .. import X: MXNet itself, outside the package
        base = package[:len(package) - (node.level - 1)]
        if node.module is None:
            for alias in node.names:
                yield node.lineno, ".".join(base + [alias.name]), ()
        else:
            yield node.lineno, ".".join(base + node.module.split(".")), tuple(a.name for a in node.names)


def import_graph(modules):
    """``{module: {imported package module, ...}}`` over the given ``{name: path}`` modules."""
    graph = {}
    for name, path in modules.items():
        graph[name] = {target for _, target, _ in _relative_imports(path) if target in modules and target != name}
    return graph


def find_cycle(graph):
    """One import cycle as a list of modules (first repeated at the end), or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, stack + [nxt])
                if found:
                    return found
        state[node] = "done"
        return None
    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def private_uses(modules):
    """``"file:line: what"`` for each private name imported from, or read off, another package module."""
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for lineno, target, names in _relative_imports(path):
            for imported in names:
                if imported.startswith("_") and not imported.startswith("__") and imported not in PRIVATE_MODULES:
                    found.append("%s:%d: from %s import %s" % (path.name, lineno, target, imported))
            if not names:
                aliases[target.rsplit(".", 1)[-1]] = target
            else:
                aliases.update({n: target + "." + n for n in names if target + "." + n in modules})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append("%s:%d: %s.%s" % (path.name, node.lineno, node.value.id, node.attr))
    return found


def test_the_package_has_no_import_cycle():
    modules = _modules()
    assert {"trainer", "module_api", "amp_state", "loss_scaler", "device_scaler", "scaler_state"} <= set(modules)
    cycle = find_cycle(import_graph(modules))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_private_name_crosses_a_module_boundary():
    assert private_uses(_modules()) == []


def test_the_shared_state_modules_stay_below_their_users():
    graph = import_graph(_modules())
    assert "trainer" not in graph["module_api"] and "module_api" in graph["trainer"]
    assert graph["amp_state"] == set() and graph["scaler_state"] == set()  # leaves: no package imports
    assert "loss_scaler" not in graph["device_scaler"] and "device_scaler" in graph["loss_scaler"]


@pytest.mark.parametrize("source,cycle", [
    ({"a": "from . import b\n", "b": "def f():\n    from .a import g\n"}, ["a", "b", "a"]),
    ({"a": "from .b import x\n", "b": "from .c import y\n", "c": "from . import a\n"}, ["a", "b", "c", "a"]),
    ({"a": "from . import b\n", "b": "import os\n"}, None),
])
def test_the_checks_see_lazy_and_long_cycles(tmp_path, monkeypatch, source, cycle):
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    for name, text in source.items():
        (tmp_path / (name + ".py")).write_text(text)
    assert find_cycle(import_graph(_modules())) == cycle


def test_the_checks_see_private_imports_and_attributes(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    (tmp_path / "a.py").write_text("_SECRET = 1\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import _SECRET\n    return _SECRET\n")
    (tmp_path / "c.py").write_text("from . import a, _ext\nx = a._SECRET\ny = library.run\n")
    (tmp_path / "library.py").write_text("run = 1\n")
    assert private_uses(_modules()) == ["b.py:2: from a import _SECRET", "c.py:2: a._SECRET"]
