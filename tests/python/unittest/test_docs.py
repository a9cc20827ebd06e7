"""The docs cannot rot: README.md and docs/*.md are checked like code: every code block runs, every name exists.

* Structure: README.md is a front door of at most 200 lines that links every page of ``docs/``, and every
  relative link of every page (its ``#anchor`` too) points to something that exists.
* Code: every ```python block runs: each page's blocks in order, in one fresh namespace, in a child process
  per page, from an empty temporary folder. A block that cannot run here says why on the line right before
  its fence (``<!-- not-run: needs a GPU -->``; the reason is required). A block may carry hidden set-up code
  in the same place (``<!-- setup: batches = [...] -->``), run just before it in the same namespace.
* Names: every repository path in inline code, in a bash block or in another non-Python block exists
  (``tools/run.sh``, ``python/mxnet/amp/lists/``; ``mxnet/amp/...`` means ``python/mxnet/amp/...``; a source
  file named by a partial path, ``onednn/conv.cc``, fails too); every ``amp.NAME`` / ``mxnet.amp.NAME.NAME``,
  and inline code such as ``graph.rewrite_symbol`` that starts with a module of the package, resolves by import
  and getattr; every ``python -m mxnet.amp COMMAND`` names a command, and every ``--flag`` after it (or after
  ``python bench/X.py`` / ``python tools/X.py``, or alone in inline code after such a command on the same page)
  appears in that command's ``--help``.
* Rooms: the ``| room | modules | imports |`` table and the ``<!-- layers -->`` block of docs/architecture.md
  match the folders of ``python/mxnet/amp/``, their modules and what each imports (read with ``ast``, imports
  inside functions too), and no room imports one above it.

The tests read the pages of the source tree (found from this file) and run them against the installed package.
"""
import ast
import functools
import glob
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mxnet.amp.autocast.graphs import FLOOR_ENV

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README] + sorted(DOCS.glob("*.md"))
MAX_README_LINES = 200
PAGE_TIMEOUT_S = 150

_FENCE = re.compile(r"^\s*```\s*([\w+-]*)\s*$")
_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_EXTERNAL_LINK = re.compile(r"\[[^\]]*\]\([a-z][\w+.-]*:[^)]*\)")
_MARKER = re.compile(r"^<!--\s*(not-run|setup)\s*:(.*?)-->$", re.S)
_TOP_LEVEL = ("python/", "src/", "tools/", "tests/", "bench/", "docs/", ".ci/", "mxnet/")
_TOP_FILES = ("CMakeLists.txt", "setup.py", "pyproject.toml", "requirements.txt", "MANIFEST.in", "pytest.ini",
              "README.md")
_SOURCE_EXT = (".py", ".cc", ".h", ".cu", ".cuh", ".sh", ".json", ".map", ".md", ".txt", ".toml")
_PATH = re.compile(r"(?<![\w./~$-])([\w.-]+(?:/[\w.*-]+)*/?)")
_AMP_NAME = re.compile(r"(?<![\w.])(?:mxnet\.)?amp(?:\.[A-Za-z_]\w*)+")
_COMMAND = re.compile(r"(?<![\w/.-])python3?\s+(?:-m\s+mxnet\.amp(?![\w.])(?:\s+([A-Za-z][\w-]*))?"
                      r"|((?:bench|tools)/\w+\.py))")
_QUALIFIED = re.compile(r"^([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)+(?:\(.*\))?$")
_FILE_NAME = re.compile(r"\.(py|h|cc|cu|cuh|json|params|states|onnx|npy|npz|png|md|txt|sh|so(\.\d+)*)$")
#: The rooms (subpackages) of the package: inline code that starts with one (``core.library.onednn()``) names
#: something in it.
_QUALIFIABLE = {p.name for p in (ROOT / "python" / "mxnet" / "amp").iterdir() if (p / "__init__.py").is_file()}
_FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
_LONE_FLAG = re.compile(r"^\s*\[?--[A-Za-z]")


def _rel(path):
    return str(path.relative_to(ROOT))


class Page:
    """One markdown page split into fenced blocks, inline code spans (outside blocks) and prose."""

    def __init__(self, path):
        self.path = path
        self.name = _rel(path)
        self.lines = path.read_text(encoding="utf-8").splitlines()
        self.blocks = []  # dicts: lang, line (1-based, of the first code line), code, marker, reason, setup
        self.prose = []   # (line number, text) outside fenced blocks
        self.marker_errors = []
        block = None
        for number, line in enumerate(self.lines, 1):
            match = _FENCE.match(line)
            if block is None and match:
                block = {"lang": match.group(1).lower(), "line": number + 1, "code": []}
                block.update(self._marker(number))
            elif block is not None and re.match(r"^\s*```\s*$", line):
                block["code"] = "\n".join(block["code"]) + "\n"
                self.blocks.append(block)
                block = None
            elif block is not None:
                block["code"].append(line)
            else:
                self.prose.append((number, line))
        if block is not None:
            self.marker_errors.append("line %d: code block never closed" % (block["line"] - 1))

    def _marker(self, fence_line):
        """The ``<!-- not-run: ... -->`` or ``<!-- setup: ... -->`` comment ending on the line before the fence."""
        end = fence_line - 2  # index of the line before the fence
        if end < 0 or not self.lines[end].rstrip().endswith("-->"):
            return {"marker": None}
        start = end
        while start > 0 and "<!--" not in self.lines[start]:
            start -= 1
        comment = "\n".join(self.lines[start:end + 1]).strip()
        match = _MARKER.match(comment)
        if match is None:
            if re.match(r"^<!--\s*(not-run|setup)\b", comment):
                self.marker_errors.append("line %d: malformed marker %r (write <!-- not-run: REASON --> or "
                                          "<!-- setup: CODE -->)" % (start + 1, comment))
            return {"marker": None}
        kind, body = match.group(1), match.group(2)
        if kind == "not-run":
            if not body.strip():
                self.marker_errors.append("line %d: <!-- not-run: --> gives no reason" % (start + 1))
            return {"marker": kind, "reason": body.strip()}
        return {"marker": kind, "setup": body.strip("\n") + "\n", "setup_line": start + 1}

    def spans(self):
        """``(line, text)`` of every inline code span outside fenced blocks, in page order; spans in the text of a
        link to another site name things outside this repository and are left out."""
        return [(number, m.group(1)) for number, line in self.prose
                for m in _SPAN.finditer(_EXTERNAL_LINK.sub("", line))]

    def snippets(self):
        """Inline code spans and the lines of non-Python blocks, in page order: ``(line, text, kind)``."""
        items = [(number, text, "span") for number, text in self.spans()]
        for block in self.blocks:
            if block["lang"] in ("python", "py"):
                continue
            for offset, text in enumerate(_join_continuations(block["code"])):
                items.append((block["line"] + offset, text, block["lang"] or "text"))
        return sorted(items, key=lambda item: item[0])


def _join_continuations(code):
    """The lines of a shell block with ``\\`` continuations joined (on the first line; line offsets kept)."""
    out, joining, start = [], False, 0
    for line in code.splitlines():
        if joining:
            out[start] = out[start].rstrip()[:-1] + " " + line.strip()
            out.append("")
        else:
            start = len(out)
            out.append(line)
        joining = out[start].rstrip().endswith("\\")
    return out


@functools.lru_cache(maxsize=None)
def _page(path):
    return Page(path)


def _ids(paths):
    return [_rel(p) for p in paths]


# --- structure ----------------------------------------------------------------------------------------------

def test_readme_is_short():
    count = len(_page(README).lines)
    if count > MAX_README_LINES:
        pytest.fail("README.md has %d lines; the front door holds at most %d: move the details to a page of "
                    "docs/" % (count, MAX_README_LINES))


def test_docs_folder_has_pages():
    if len(PAGES) < 2:
        pytest.fail("docs/ has no .md pages")


def _links(page):
    """``(line, target)`` of every markdown link outside code."""
    out = []
    for number, line in page.prose:
        for match in _LINK.finditer(_SPAN.sub("", line)):
            out.append((number, match.group(1)))
    return out


@pytest.mark.parametrize("doc", sorted(p for p in DOCS.iterdir() if p.name != "img") if DOCS.is_dir() else [],
                         ids=lambda p: _rel(p))  # docs/img/ holds figures, linked from the pages that show them
def test_readme_links_every_docs_page(doc):
    targets = {(README.parent / target.split("#")[0]).resolve() for _, target in _links(_page(README))
               if not re.match(r"^[a-z]+:", target)}
    if doc.resolve() not in targets:
        pytest.fail("README.md does not link %s: every page of docs/ is linked from README.md" % _rel(doc))


def _slug(heading):
    """GitHub's anchor for a heading: link targets dropped, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page):
    seen, out = {}, set()
    for _, line in page.prose:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            out.add(slug if count == 0 else "%s-%d" % (slug, count))
    return out


@pytest.mark.parametrize("path", PAGES, ids=_ids(PAGES))
def test_relative_links_resolve(path):
    page = _page(path)
    bad = []
    for number, target in _links(page):
        if re.match(r"^[a-z][\w+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append("line %d: %s: no such file %s" % (number, target, dest))
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(_page(dest)):
            bad.append("line %d: %s: %s has no heading with anchor #%s" % (number, target, _rel(dest), anchor))
    if bad:
        pytest.fail("%s: broken links:\n  %s" % (page.name, "\n  ".join(bad)))


# --- code blocks --------------------------------------------------------------------------------------------

_RUNNER = r'''
import json, sys
ns = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1])):
    exec(compile(block["code"], block["file"], "exec"), ns)
'''


def _runnable(page):
    """The page's python blocks to run, as ``{"code", "file"}`` (set-up first), line numbers kept."""
    out = []
    for block in page.blocks:
        if block["lang"] not in ("python", "py") or block["marker"] == "not-run":
            continue
        if block["marker"] == "setup":
            out.append({"code": "\n" * block["setup_line"] + block["setup"],
                        "file": "%s (set-up of the block at line %d)" % (page.name, block["line"])})
        out.append({"code": "\n" * (block["line"] - 1) + block["code"], "file": page.name})
    return out


_CODE_PAGES = [p for p in PAGES if any(b["lang"] in ("python", "py") for b in _page(p).blocks)]


@pytest.mark.parametrize("path", PAGES, ids=_ids(PAGES))
def test_block_markers_are_well_formed(path):
    page = _page(path)
    if page.marker_errors:
        pytest.fail("%s:\n  %s" % (page.name, "\n  ".join(page.marker_errors)))


def _user_env():
    """The environment without the tests' settings: the pages show what users get (the measured graph floor)."""
    return {k: v for k, v in os.environ.items() if k != FLOOR_ENV}


@pytest.mark.parametrize("path", _CODE_PAGES, ids=_ids(_CODE_PAGES))
def test_python_blocks_run(path, tmp_path):
    page = _page(path)
    blocks = _runnable(page)
    if not blocks:
        return  # every block says why it cannot run here (test_block_markers_are_well_formed checks that)
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "run_blocks.py").write_text(_RUNNER)
    work = tmp_path / "cwd"
    work.mkdir()
    try:
        proc = subprocess.run([sys.executable, str(tmp_path / "run_blocks.py"), str(tmp_path / "blocks.json")],
                              cwd=str(work), env=_user_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=PAGE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail("%s: its python blocks did not finish in %d s" % (page.name, PAGE_TIMEOUT_S))
    output = proc.stdout.decode(errors="replace")
    if proc.returncode != 0:
        start = output.rfind("Traceback (most recent call last)")
        pytest.fail("%s: a python block failed (exit status %d); the traceback names the page's line:\n%s"
                    % (page.name, proc.returncode, output[start:][-6000:] if start >= 0 else output[-6000:]))


# --- names --------------------------------------------------------------------------------------------------

def _repo_paths(text):
    """The repository paths named in ``text``."""
    out = []
    for match in _PATH.finditer(text):
        token = match.group(1).rstrip(".")
        if token.startswith(_TOP_LEVEL) or token in _TOP_FILES:
            out.append(token)
        elif "/" in token and token.endswith(_SOURCE_EXT) and not token.startswith(("../", "./")):
            out.append(token)  # a source file named by a partial path: must be a full one
    return out


def _path_exists(token):
    rel = "python/" + token if token.startswith("mxnet/") else token
    if "*" in rel:
        return bool(glob.glob(str(ROOT / rel)))
    target = ROOT / rel
    return target.is_dir() if rel.endswith("/") else target.exists()


@pytest.mark.parametrize("path", PAGES, ids=_ids(PAGES))
def test_repo_paths_exist(path):
    page = _page(path)
    bad = sorted({"line %d: %s" % (number, token) for number, text, _ in page.snippets()
                  for token in _repo_paths(text) if not _path_exists(token)})
    if bad:
        pytest.fail("%s names repository paths that do not exist:\n  %s" % (page.name, "\n  ".join(bad)))


def _resolve(dotted):
    """Import ``mxnet.amp`` and walk ``dotted`` by getattr, importing submodules on the way; None if it fails."""
    parts = dotted.split(".")
    if parts[0] == "mxnet":
        parts = parts[1:]
    module_name = "mxnet.amp"
    obj = importlib.import_module(module_name)
    for part in parts[1:]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            try:
                obj = importlib.import_module("%s.%s" % (module_name, part))
            except ImportError:
                return None
        if isinstance(obj, type(sys)):
            module_name = obj.__name__
    return obj


def _amp_names(page):
    """``(line, dotted name)`` to resolve: ``amp.X`` / ``mxnet.amp.X`` anywhere in code, and inline code that is a
    room of the package and a name in it (``graph.rewrite.rewrite_symbol``, ``core.library.onednn()``)."""
    texts = [(number, text) for number, text in page.spans()]
    texts += [(b["line"], b["code"]) for b in page.blocks]
    names = {(number, m.group(0)) for number, text in texts for m in _AMP_NAME.finditer(text)}
    for number, text in page.spans():
        match = _QUALIFIED.match(text)
        if match and match.group(1) in _QUALIFIABLE and not _FILE_NAME.search(text):
            names.add((number, "amp." + match.group(0).split("(")[0]))
    return sorted(names)


@pytest.mark.parametrize("path", PAGES, ids=_ids(PAGES))
def test_amp_names_resolve(path):
    page = _page(path)
    bad = ["line %d: %s" % (number, name) for number, name in _amp_names(page) if _resolve(name) is None]
    if bad:
        pytest.fail("%s names mxnet.amp attributes that do not exist:\n  %s" % (page.name, "\n  ".join(bad)))


def _commands(page):
    """``(line, command, flags)`` for every command named on the page; ``command`` is ``("mxnet.amp", SUB)`` or
    ``("script", PATH)``. A lone ``--flag`` in inline code belongs to the last command named before it."""
    out, last = [], None
    for number, text, kind in page.snippets():
        if kind not in ("span", "bash", "sh", "shell", "console"):
            continue
        found = False
        for segment in re.split(r"\|\||&&|[|;]|(?<!\S)#", text):
            match = _COMMAND.search(segment)
            if match is None:
                continue
            found = True
            last = ("mxnet.amp", match.group(1)) if match.group(2) is None else ("script", match.group(2))
            out.append((number, last, _FLAG.findall(segment[match.end():])))
        if kind == "span" and not found and _LONE_FLAG.match(text):
            out.append((number, last, _FLAG.findall(text)))
    return out


@functools.lru_cache(maxsize=None)
def _amp_helps():
    """``{command: --help text}`` of ``python -m mxnet.amp`` ('' is the top level), from one child process."""
    code = ("import contextlib, io, json\n"
            "from mxnet.amp import __main__ as cli\n"
            "helps = {}\n"
            "for name in [''] + list(cli.COMMANDS):\n"
            "    buf = io.StringIO()\n"
            "    with contextlib.redirect_stdout(buf):\n"
            "        try:\n"
            "            cli.main(([name] if name else []) + ['--help'])\n"
            "        except SystemExit:\n"
            "            pass\n"
            "    helps[name] = buf.getvalue()\n"
            "print(json.dumps(helps))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120, check=False)
    if proc.returncode != 0:
        pytest.fail("python -m mxnet.amp --help failed:\n%s" % proc.stderr.decode()[-3000:])
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


@functools.lru_cache(maxsize=None)
def _script_help(script, cwd):
    proc = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=cwd, env=dict(os.environ),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False)
    return proc.returncode, proc.stdout.decode(errors="replace")


def _flag_problems(page, cwd):
    bad = []
    for number, command, flags in _commands(page):
        if command is None:
            bad.append("line %d: %s is not after any command on this page" % (number, " ".join(flags)))
            continue
        kind, name = command
        if kind == "mxnet.amp":
            helps = _amp_helps()
            if name is None:
                help_text, label = helps[""], "python -m mxnet.amp"
            elif name not in helps or not name:
                bad.append("line %d: python -m mxnet.amp %s: no such command (commands: %s)"
                           % (number, name, ", ".join(sorted(n for n in helps if n))))
                continue
            else:
                help_text, label = helps[name], "python -m mxnet.amp %s" % name
        else:
            label = "python %s" % name
            if not (ROOT / name).is_file():
                bad.append("line %d: %s: no such script" % (number, label))
                continue
            status, help_text = _script_help(name, cwd)
            if status != 0:
                bad.append("line %d: %s --help failed (exit status %d): %s"
                           % (number, label, status, help_text[-500:]))
                continue
        for flag in flags:
            if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(flag), help_text):
                bad.append("line %d: %s does not accept %s" % (number, label, flag))
    return bad


@pytest.mark.parametrize("path", PAGES, ids=_ids(PAGES))
def test_command_lines_are_accepted(path, tmp_path_factory):
    page = _page(path)
    bad = _flag_problems(page, str(tmp_path_factory.getbasetemp()))
    if bad:
        pytest.fail("%s names command lines that do not work:\n  %s" % (page.name, "\n  ".join(bad)))


# --- the architecture page against the source ---------------------------------------------------------------

_PACKAGE = ROOT / "python" / "mxnet" / "amp"
_ROOMS_TABLE = re.compile(r"^\|\s*room\s*\|\s*modules\s*\|\s*imports\s*\|")
#: The package's top level (``__init__``, ``__main__``) as a room of the table.
_FACE = "mxnet.amp"


def _room_of(module):
    """The room of a dotted module name relative to ``mxnet.amp`` ('' is the package itself)."""
    return module.split(".")[0] if "." in module or (_PACKAGE / module).is_dir() else _FACE


def _package_rooms():
    """``{room: (modules, rooms imported)}`` read from the source tree with ``ast`` (imports inside functions too;
    a subpackage's ``__init__`` is a docstring, not a module of the table)."""
    out = {}
    for path in sorted(_PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(_PACKAGE).with_suffix("").parts)
        if len(parts) > 1 and parts[-1] == "__init__" and parts[0] != "lists":
            continue
        room = parts[0] if len(parts) > 1 else _FACE
        modules, imported = out.setdefault(room, (set(), set()))
        modules.add(parts[-1])
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level and node.level - 1 <= len(package):
                base = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                targets = [".".join(base + [a.name]) for a in node.names] if not node.module else [".".join(base)]
                imported.update(_room_of(t) for t in targets if t)
    return {room: (modules, imported - {room}) for room, (modules, imported) in out.items()}


def _cell_names(cell):
    return {name.rstrip("/") for name in re.findall(r"`([\w./]+)`", cell)}


def _rooms_table(page):
    """``{room: (modules, imports)}`` from the page's ``| room | modules | imports | ... |`` table, or None."""
    rows, inside = {}, False
    for _, line in page.prose:
        if _ROOMS_TABLE.match(line):
            inside = True
            continue
        if inside and not line.startswith("|"):
            break
        if inside and not re.match(r"^\|[\s|:-]+\|$", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            room = next(iter(_cell_names(cells[0])))
            rows[_FACE if room in (_FACE, "mxnet/amp") else room] = (_cell_names(cells[1]), _cell_names(cells[2]))
    return rows if inside else None


def _layers(page):
    """Room names in the reading order of the ``<!-- layers ... -->`` block (top first), or None."""
    for block in page.blocks:
        fence = block["line"] - 2
        if fence >= 1 and page.lines[fence - 1].startswith("<!-- layers"):
            return [w.rstrip("/") for line in block["code"].splitlines() for w in line.split()[1:]]
    return None


_ARCH_PAGES = [p for p in PAGES if _rooms_table(_page(p)) is not None]


@pytest.mark.parametrize("path", _ARCH_PAGES, ids=_ids(_ARCH_PAGES))
def test_the_rooms_match_the_source(path):
    page = _page(path)
    table, actual = _rooms_table(page), _package_rooms()
    bad = ["no row for room %s" % room for room in sorted(set(actual) - set(table))]
    bad += ["row for %s, which is not a folder of python/mxnet/amp/" % room
            for room in sorted(set(table) - set(actual))]
    for room in sorted(set(table) & set(actual)):
        for kind, said, real in zip(("holds", "imports"), table[room], actual[room]):
            if said != real:
                bad.append("%s %s %s; the page says %s" % (room, kind, ", ".join(sorted(real)) or "nothing",
                                                           ", ".join(sorted(said)) or "nothing"))
    order = _layers(page)
    if order is None:
        bad.append("no <!-- layers ... --> block")
    else:
        position = {room: i for i, room in enumerate(order)}
        bad += ["room %s is missing from the layers block" % r for r in sorted(set(actual) - set(position))]
        for room, (_, imported) in sorted(actual.items()):
            for target in sorted(imported):
                if room in position and target in position and position[target] <= position[room]:
                    bad.append("%s imports %s, which is not below it in the layers block" % (room, target))
    if bad:
        pytest.fail("%s: the rooms do not match python/mxnet/amp/:\n  %s" % (page.name, "\n  ".join(bad)))
