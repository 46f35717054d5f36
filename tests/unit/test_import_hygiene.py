"""Import hygiene (issue 32, item 2): import circles and function-local imports, read statically from the source.

The tree's modules are parsed with :mod:`ast` (nothing is imported but ``tensorwire`` itself, for its table of lazy
names). Two ratchets, each a table below that may only go down:

- **Circles.** The module-level import graph (what runs when a module is imported: imports at module level, in
  class bodies, ``if``/``try`` blocks; not ``if TYPE_CHECKING:``, not inside functions) must have no strongly
  connected component anywhere in the tree (the client's modules, codegen, the backends, the services: the issue
  asked it of the client and codegen; since session 30 none is left elsewhere either) beyond :data:`KNOWN_CIRCLES`.
  A circle may shrink or split; a new module in one, or a new circle, fails. The same holds for the graph with the
  function-local imports added (what a call may load) and :data:`KNOWN_LOCAL_CIRCLES`.
- **Function-local imports.** An ``import`` inside a function hides a dependency (and often a circle). The rule
  (``docs/architecture.md``, "Imports"): module level by default; a local import carries its reason on its line
  or the comment line above it, ``# lazy: <why>`` (an optional or heavy dependency, a platform library that may be
  absent, a service the caller may not need) or ``# circle: <which modules>``. A loader that imports a module by
  its name at run time (``importlib.import_module(...)``, wherever it stands) hides a dependency the same way and
  counts as one, with its reason the same way. :data:`LOCAL_IMPORTS` caps the count per folder,
  :data:`UNREASONED` the count without a reason.

``python tests/unit/test_import_hygiene.py`` prints the circles (module-level, and with the local imports added)
and the counts, with each unreasoned local import's place.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: folders that hold no shipped code: their imports are not counted
SKIP = ("tests", "benchmarks", "build", "dist", "deploy", "docs")
#: a reason on a function-local import (its own lines or the comment line just above)
REASON = re.compile(r"#\s*(lazy|circle):\s*\S")
#: a line of an import block (an import, or a continuation line of names): a reason above the block covers it
_IMPORT_LINE = re.compile(r"(import |from )[^#]*(#.*)?|[\w\s,()]+")

#: Module-level import circles that exist today (each a strongly connected component), anywhere in the tree. Delete
#: a module from a set when its circle no longer holds it, a set when it is gone.
KNOWN_CIRCLES: list[frozenset[str]] = [
    # none left at module level since session 22 (the engine and Tensor install themselves in autograd_hooks and
    # indexing); since session 27 the client core's local imports tie none of its modules either; since session 28
    # none in the nn package or jit
]
#: The same for the graph with the function-local imports added (what a call may still load): none since session 29
#: (the 65 modules tied through hub -> hub.tensors and the client's imports of the hub package: what the client and
#: the workers need of the hub moved to tensorwire.protocol.hub; the 18 through torch_flags -> accelerator: the
#: cluster question moved to backends.lazy_plugin, its one user: docs/architecture.md, "Imports"); since session 30
#: none outside the client either (backends <-> backends.cpu: ``hookimpl`` is hookspecs'; backends.executor <->
#: backends.hot: a tier is handed the executor's ``compile_plan``), so the check covers the whole tree
KNOWN_LOCAL_CIRCLES: list[frozenset[str]] = []

#: function-local imports per folder (outside tests/, benchmarks/): the most each may hold. Lower a number when you
#: move imports to module level; a folder not listed may hold none.
#: (``importlib.import_module`` loaders included: 2 in backends, 3 in client, 1 in client/nn: ``tw.nn.modules``,
#: torch's tree of re-exports, loaded at its first use rather than with every ``tw.nn``, session 38)
LOCAL_IMPORTS: dict[str, int] = {
    "autograd": 1, "backends": 4, "backends/codegen": 1, "backends/cpu": 1, "backends/cuda": 2, "backends/mps": 2,
    "backends/opencl": 1, "backends/rocm": 2, "client": 14, "client/nn": 1, "collectives": 1, "dashboard": 1,
    "examples": 1, "hub": 1, "protocol": 5, "protocol/hub": 2,
}
#: of those, the most that may lack a ``# lazy:`` / ``# circle:`` reason (the goal: none, and fewer than 40 in all)
UNREASONED: dict[str, int] = {}


@dataclass(frozen=True)
class LocalImport:
    """One import statement inside a function, or one ``importlib.import_module`` loader (wherever it stands)."""

    path: str  # relative to the repository root
    line: int
    text: str
    reason: str | None  # "lazy" or "circle", None when the line gives none
    loader: bool = False  # an ``importlib.import_module`` call, not an import statement

    @property
    def folder(self) -> str:
        return self.path.rpartition("/")[0] or "."


def module_name(rel: Path) -> str | None:
    """The dotted name setuptools' ``package-dir`` gives a file (``client/`` is ``tensorwire``, ``X/`` is
    ``tensorwire.X``); None for a file outside the package (examples)."""
    top = rel.parts[0]
    if not (ROOT / top / "__init__.py").exists():
        return None
    parts = ["tensorwire"] + ([] if top == "client" else [top]) + list(rel.parts[1:])
    parts[-1] = parts[-1][:-3]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[Path, str | None]:
    """Every shipped Python file (relative path) and its module name."""
    out = {}
    # (not descending into a virtual environment at the top, the README's ``venv``: a folder with a pyvenv.cfg)
    tops = [ROOT] + [d for d in sorted(ROOT.iterdir()) if d.is_dir() and d.name not in SKIP
                     and not d.name.startswith(".") and not (d / "pyvenv.cfg").exists()]
    for top in tops:
        for path in sorted(top.glob("*.py") if top is ROOT else top.rglob("*.py")):
            rel = path.relative_to(ROOT)
            if any(p in ("build", "__pycache__") or p.endswith(".egg-info") for p in rel.parts):
                continue
            out[rel] = module_name(rel)
    return dict(sorted(out.items()))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


#: the nodes that can hold statements (an expression holds none, a lambda's body included): the walk descends into
#: these only, a tenth of a tree's nodes
_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _walk(node: ast.AST, in_function: bool, module_level: list, local: list) -> None:
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _HOLDS_STATEMENTS):
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            (local if in_function else module_level).append(child)
        elif isinstance(child, ast.If) and _is_type_checking(child.test) and not in_function:
            for sub in child.orelse:  # the TYPE_CHECKING body never runs
                _walk(ast.Module(body=[sub], type_ignores=[]), False, module_level, local)
            continue
        _walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
              module_level, local)


def _is_loader(node: ast.AST) -> bool:
    """Whether ``node`` calls ``import_module`` (``importlib.import_module``, under any alias of importlib, or the
    name imported from it)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")


def _loaders(tree: ast.AST) -> list[ast.Call]:
    """The ``import_module`` calls in a parsed file, in line order."""
    return sorted((n for n in ast.walk(tree) if _is_loader(n)), key=lambda n: (n.lineno, n.col_offset))


def _reason(lines: list[str], node: ast.stmt) -> str | None:
    """``lazy`` or ``circle`` when the statement's lines carry a reason, or the comment line above the block of
    imports it belongs to does; else None."""
    candidates = lines[node.lineno - 1:node.end_lineno]
    i = node.lineno - 2
    while i >= 0 and (_IMPORT_LINE.fullmatch(lines[i].strip()) or (
            not lines[i].strip() and i > 0 and _IMPORT_LINE.fullmatch(lines[i - 1].strip()))):
        i -= 1  # up the block of imports (isort's blank lines between sections included)
    if i >= 0 and lines[i].strip().startswith("#"):
        candidates.append(lines[i])
    for text in candidates:
        m = REASON.search(text)
        if m:
            return m.group(1)
    return None


def _lazy_names() -> dict[str, tuple[str, ...]]:
    """``tensorwire``'s public names and the modules ``from tensorwire import name`` imports for each (PEP 562)."""
    import tensorwire

    extra = getattr(tensorwire, "_EXTRA", {})
    return {name: (module, *extra.get(name, ())) for name, (module, _) in getattr(tensorwire, "_LAZY", {}).items()}


class Tree:
    """The parsed tree: the import graphs and the function-local imports."""

    def __init__(self) -> None:
        self.files = source_files()
        self.modules = {name: rel for rel, name in self.files.items() if name}
        self.lazy = _lazy_names()
        #: module -> the modules its module-level imports load; ``full`` adds the function-local ones
        self.graph: dict[str, set[str]] = {name: set() for name in self.modules}
        self.full: dict[str, set[str]] = {name: set() for name in self.modules}
        self.local: list[LocalImport] = []
        for rel, name in self.files.items():
            text = (ROOT / rel).read_text(encoding="utf-8")
            lines = text.splitlines()
            module_level: list[ast.stmt] = []
            local: list[ast.stmt] = []
            parsed = ast.parse(text, filename=str(rel))
            _walk(parsed, False, module_level, local)
            for node in local:
                self.local.append(LocalImport(rel.as_posix(), node.lineno, lines[node.lineno - 1].strip(),
                                              _reason(lines, node)))
            for call in _loaders(parsed):
                self.local.append(LocalImport(rel.as_posix(), call.lineno, lines[call.lineno - 1].strip(),
                                              _reason(lines, call), loader=True))
            if name is None:
                continue
            package = name if rel.name == "__init__.py" else name.rpartition(".")[0]
            for node in module_level:
                self.graph[name] |= self._targets(node, package)
            for node in module_level + local:
                self.full[name] |= self._targets(node, package)
            self.graph[name].discard(name)
            self.full[name].discard(name)

    def _targets(self, node: ast.stmt, package: str) -> set[str]:
        """The tree's modules an import statement loads: the modules named, and the packages above them that the
        importer's own package does not hold (importing ``tensorwire.jit.recording`` runs ``tensorwire/jit/__init__``
        first; a module importing its sibling finds its package already there)."""
        out: set[str] = set()
        if isinstance(node, ast.Import):
            out = {a.name for a in node.names if a.name in self.modules}
        else:
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in self.modules:
                    out.add(sub)
                elif base == "tensorwire" and alias.name in self.lazy:
                    out.update(m for m in self.lazy[alias.name] if m in self.modules)
                elif base in self.modules:  # a name the module (or package ``__init__``) defines
                    out.add(base)
        mine = {package.rsplit(".", i)[0] for i in range(package.count(".") + 1)}
        for target in list(out):
            parts = target.split(".")
            out.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts)))
                       if p in self.modules and p not in mine)
        return out

    def circles(self, graph: dict[str, set[str]] | None = None) -> list[frozenset[str]]:
        """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
        graph = self.graph if graph is None else graph
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[frozenset[str]] = []
        for root in sorted(graph):
            if root in index:
                continue
            work = [(root, iter(sorted(graph[root])))]
            index[root] = low[root] = len(index)
            stack.append(root)
            on_stack.add(root)
            while work:
                node, edges = work[-1]
                for nxt in edges:
                    if nxt not in index:
                        index[nxt] = low[nxt] = len(index)
                        stack.append(nxt)
                        on_stack.add(nxt)
                        work.append((nxt, iter(sorted(graph[nxt]))))
                        break
                    if nxt in on_stack:
                        low[node] = min(low[node], index[nxt])
                else:
                    work.pop()
                    if work:
                        low[work[-1][0]] = min(low[work[-1][0]], low[node])
                    if low[node] == index[node]:
                        component = set()
                        while True:
                            member = stack.pop()
                            on_stack.discard(member)
                            component.add(member)
                            if member == node:
                                break
                        if len(component) > 1:
                            found.append(frozenset(component))
        return found

    def counts(self, unreasoned_only: bool = False) -> Counter:
        """Function-local imports per folder."""
        return Counter(i.folder for i in self.local if not (unreasoned_only and i.reason))


_TREE: Tree | None = None


def tree() -> Tree:
    global _TREE
    if _TREE is None:
        _TREE = Tree()
    return _TREE


def over_limits(counts: Counter, limits: dict[str, int]) -> dict[str, tuple[int, int]]:
    """The folders whose count passes its limit: folder -> (count, limit)."""
    return {folder: (n, limits.get(folder, 0)) for folder, n in sorted(counts.items()) if n > limits.get(folder, 0)}


def new_circles(found: list[frozenset[str]], known: list[frozenset[str]]) -> list[list[str]]:
    """The circles (sorted module lists) not inside one of the known ones."""
    return [sorted(c) for c in found if not any(c <= k for k in known)]


def test_no_new_import_circle():
    got = new_circles(tree().circles(), KNOWN_CIRCLES)
    assert got == [], (
        f"new module-level import circles: {got}. Move the shared piece to a "
        "lower module (or depend on a protocol/type) instead of importing back up; KNOWN_CIRCLES lists today's.")


def test_no_new_circle_through_function_local_imports():
    got = new_circles(tree().circles(tree().full), KNOWN_LOCAL_CIRCLES)
    assert got == [], (
        f"new import circles once function-local imports count: {got}. A "
        "local import still runs at call time; move the shared piece below both sides (tensorwire.protocol.hub is "
        "the hub's) instead of importing back up; KNOWN_LOCAL_CIRCLES lists today's.")


def test_function_local_imports_do_not_grow():
    over = over_limits(tree().counts(), LOCAL_IMPORTS)
    places = [f"{i.path}:{i.line}" for i in tree().local if i.folder in over]
    assert over == {}, (
        f"function-local imports past the limit per folder (count, limit): {over} (in {places}). Import at module "
        "level; where that cannot be, say why on the line (`# lazy: <why>` or `# circle: <modules>`) and raise "
        "LOCAL_IMPORTS in this file with the reason in the review.")


def test_every_new_function_local_import_says_why():
    over = over_limits(tree().counts(unreasoned_only=True), UNREASONED)
    places = [f"{i.path}:{i.line} {i.text}" for i in tree().local if i.folder in over and not i.reason]
    assert over == {}, (
        f"function-local imports without a `# lazy: <why>` or `# circle: <modules>` reason past the limit (count, "
        f"limit): {over}: {places}")


# --- the checks check: a new local import, an unreasoned one and a new circle are each caught ----------------------

def test_the_checks_catch_a_new_local_import_and_a_new_circle():
    counts = tree().counts()
    folder = "client/nn"
    assert over_limits(counts + Counter({folder: LOCAL_IMPORTS.get(folder, 0) - counts[folder] + 1}),
                       LOCAL_IMPORTS) != {}
    assert over_limits(Counter({"somewhere/new": 1}), LOCAL_IMPORTS) == {"somewhere/new": (1, 0)}
    # a circle through two modules no known circle holds
    graph = {m: set(e) for m, e in tree().graph.items()}
    graph["tensorwire.optim.optimizer"].add("tensorwire.optim.lr_scheduler")
    graph["tensorwire.optim.lr_scheduler"].add("tensorwire.optim.optimizer")
    assert ["tensorwire.optim.lr_scheduler", "tensorwire.optim.optimizer"] in new_circles(tree().circles(graph),
                                                                                 KNOWN_CIRCLES)
    # the client reaching the hub package again (a local import of tensorwire.hub.server, as the cluster's once was)
    full = {m: set(e) for m, e in tree().full.items()}
    full["tensorwire.cluster"] |= {"tensorwire.hub", "tensorwire.hub.server"}
    got = new_circles(tree().circles(full), KNOWN_LOCAL_CIRCLES)
    assert any({"tensorwire.cluster", "tensorwire.hub", "tensorwire.hub.tensors"} <= set(c) for c in got), got
    # a circle outside the client (backends.hot importing the executor back, as its compile did until session 30)
    full = {m: set(e) for m, e in tree().full.items()}
    full["tensorwire.backends.hot"].add("tensorwire.backends.executor")
    assert ["tensorwire.backends.executor", "tensorwire.backends.hot"] in new_circles(tree().circles(full),
                                                                                      KNOWN_LOCAL_CIRCLES)


def test_the_parser_reads_reasons_and_relative_imports():
    src = ("def f():\n    import scipy  # lazy: optional\n    # circle: tensor <-> session\n"
           "    from .tensor import Tensor\n    from .session import (\n        Session,\n    )\n\n"
           "    import json\n    x = 1\n    import os\n")
    module_level: list = []
    local: list = []
    _walk(ast.parse(src), False, module_level, local)
    lines = src.splitlines()
    assert [_reason(lines, n) for n in local] == ["lazy", "circle", "circle", "circle", None]
    loaders = ("import importlib\nfrom importlib import import_module\ndef f(name):\n"
               "    # lazy: the plugin's module, named at run time\n    m = importlib.import_module(name)\n"
               "    return import_module(name + '.x'), m\n")
    found = _loaders(ast.parse(loaders))
    assert [n.lineno for n in found] == [5, 6]
    assert [_reason(loaders.splitlines(), n) for n in found] == ["lazy", None]
    t = tree()
    node = ast.parse("from ..functions import cat, where\nfrom . import functional").body
    assert t._targets(node[0], "tensorwire.nn") == {"tensorwire.functions"}
    assert t._targets(node[1], "tensorwire.nn") == {"tensorwire.nn.functional"}
    assert t._targets(ast.parse("from tensorwire import zeros").body[0], "x") >= {"tensorwire.creation"}


if __name__ == "__main__":
    t = tree()
    for title, graph in (("module-level", t.graph), ("with function-local imports", t.full)):
        print(f"circles ({title}):")
        for c in sorted(t.circles(graph), key=len, reverse=True):
            print(f"  {len(c)}: {' '.join(sorted(c))}")
    total, plain = t.counts(), t.counts(unreasoned_only=True)
    loaders = sum(i.loader for i in t.local)
    print(f"function-local imports: {sum(total.values())} ({sum(plain.values())} without a reason; {loaders} of them "
          "importlib.import_module loaders)")
    for folder, n in total.most_common():
        print(f"  {n:4d} {plain[folder]:4d} {folder}")
    if "-v" in sys.argv:
        for i in t.local:
            if not i.reason:
                print(f"{i.path}:{i.line}: {i.text}")
