"""The package's modules talk through named interfaces.

* no import cycles, lazy imports inside functions included;
* no private (``_name``) attribute imported or read from another module of the package;
* every name a module imports from another module of the package is in that module's ``__all__``, and every
  name of a module's ``__all__`` is used outside it (by another module, a test, a bench or a tool): ``__all__``
  lists exactly what other rooms may use, so everything else is visibly internal.

Read from the source tree with ``ast``: what is checked is the code as written, not what happened to run. The
rooms (folders) and which may import which are docs/architecture.md's, checked by test_docs.py.
"""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "python" / "mxnet" / "amp"
#: Modules of plain data (tuples and dicts): every name is theirs to share, so they have no ``__all__``.
DATA_MODULES = ("lists.groups", "lists.float16", "lists.bfloat16", "lists.rounding")
#: Where names of the package are used from outside it.
USERS = ("tests", "bench", "tools", "docs", "README.md")


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
    if name == "":
        package = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        if node.level - 1 > len(package):
            continue  # from ... import X: MXNet itself, outside the package
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


def _aliases(path, modules):
    """``{local name: module}`` for the package modules ``path`` imports as a whole (``from . import x as y``)."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    aliases = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level == 0 or node.level - 1 > len(package):
            continue
        base = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
        for alias in node.names:
            target = ".".join(base + [alias.name])
            if target in modules:
                aliases[alias.asname or alias.name] = target
    return aliases


def uses(modules):
    """``[(file, line, module, name)]``: each name a package module takes from another one, by ``from M import
    name`` or ``M.name`` (M imported as a whole)."""
    found = []
    for name, path in modules.items():
        for lineno, target, names in _relative_imports(path):
            if target in modules and target != name:
                found += [(path, lineno, target, n) for n in names if target + "." + n not in modules]
        aliases = _aliases(path, modules)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                target = aliases[node.value.id]
                if target != name and target + "." + node.attr not in modules:
                    found.append((path, node.lineno, target, node.attr))
    return found


def private_uses(modules):
    """``"file:line: what"`` for each private name imported from, or read off, another package module."""
    return ["%s:%d: %s.%s" % (path.relative_to(PACKAGE), line, target, n) for path, line, target, n in uses(modules)
            if n.startswith("_") and not n.startswith("__")]


def exports(path):
    """The names of the module's ``__all__`` (None when it has none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    return None


def unexported_uses(modules):
    """``"file:line: module.name"`` for each name taken from another module that its ``__all__`` lacks."""
    bad = []
    for path, line, target, n in uses(modules):
        listed = exports(modules[target])
        if listed is not None and n not in listed and not n.startswith("__"):
            bad.append("%s:%d: %s.%s" % (path.relative_to(PACKAGE), line, target, n))
    return bad


def _outside_text():
    texts = []
    for where in USERS:
        base = ROOT / where
        files = [base] if base.is_file() else sorted(base.rglob("*.py")) + sorted(base.rglob("*.md")) + \
            sorted(base.rglob("*.sh"))
        texts += [f.read_text(errors="replace") for f in files]
    return "\n".join(texts)


def unused_exports(modules):
    """``"module.name"`` for each name of a module's ``__all__`` that nothing outside the module uses."""
    taken = {(target, n) for _, _, target, n in uses(modules)}
    outside = _outside_text()
    bad = []
    for name, path in modules.items():
        for n in exports(path) or ():
            if name == "" or name.startswith("lists") or (name, n) in taken:
                continue  # the API, and upstream's list modules, are used by users
            if not re.search(r"(?<![\w])%s(?![\w])" % re.escape(n), outside):
                bad.append("%s.%s" % (name, n))
    return bad


def test_the_package_has_no_import_cycle():
    modules = _modules()
    assert {"training.trainer", "training.module_api", "core.library", "graph.rewrite"} <= set(modules)
    cycle = find_cycle(import_graph(modules))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_private_name_crosses_a_module_boundary():
    assert private_uses(_modules()) == []


def test_every_module_has_an_all_and_others_take_only_from_it():
    modules = _modules()
    missing = sorted(n for n, p in modules.items() if exports(p) is None and p.name != "__init__.py"
                     and n != "__main__" and n not in DATA_MODULES)
    assert missing == [], "modules without __all__: %s" % missing
    assert unexported_uses(modules) == []


def test_every_exported_name_is_used_outside_its_module():
    assert unused_exports(_modules()) == []


def test_the_shared_state_modules_stay_below_their_users():
    graph = import_graph(_modules())
    assert "training.trainer" not in graph["training.module_api"]
    assert "training.module_api" in graph["training.trainer"]
    assert graph["training.scaler_state"] == set()  # a leaf: the pure rule, no package imports
    assert "training.loss_scaler" not in graph["training.device_scaler"]
    assert "training.device_scaler" in graph["training.loss_scaler"]
    base = {n for n in graph if n.startswith("base")}
    assert all(t in base for n in base for t in graph[n]), "base imports nothing above it"


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


def test_the_checks_see_private_and_unexported_names(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    (tmp_path / "a.py").write_text("__all__ = ['shared']\n_SECRET = 1\nshared = 2\ninternal = 3\n")
    (tmp_path / "b.py").write_text("__all__ = []\ndef f():\n    from .a import _SECRET\n    return _SECRET\n")
    (tmp_path / "c.py").write_text("__all__ = []\nfrom . import a\nx = a._SECRET\ny = a.shared\nz = a.internal\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    (sub / "d.py").write_text("__all__ = []\nfrom ..a import internal\n")
    assert private_uses(_modules()) == ["b.py:3: a._SECRET", "c.py:3: a._SECRET"]
    assert unexported_uses(_modules()) == ["b.py:3: a._SECRET", "c.py:3: a._SECRET", "c.py:5: a.internal",
                                           "sub/d.py:2: a.internal"]


def test_modules_and_functions_stay_small():
    """No module over 450 lines but the data tables, no function (nested ones included) over 80."""
    big, long = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if _module_name(path) not in DATA_MODULES and text.count("\n") > 450:
            big.append("%s (%d lines)" % (_module_name(path), text.count("\n")))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append("%s.%s (%d lines)" % (_module_name(path), node.name, node.end_lineno - node.lineno + 1))
    assert big == [] and long == [], (big, long)
