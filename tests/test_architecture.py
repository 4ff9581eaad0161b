"""Issue 11's acceptance, kept true: the module table in docs/architecture.md matches the tree, no library
module is over 400 lines (but the few named in MODULE_ALLOWED, each with its reason, up to 500) and no library
function over 60.  Issue 30's guards on what people import: what reading our shards loads, and no import
cycle between files (but the few named in CYCLES_ALLOWED, each with its reason; none in ``storage/`` or ``job/``).

The table's convention (stated above it in docs/architecture.md): a row names modules (``path.py``) or a
package (``pkg/``) in its first column, relative to ``shardprep/``; a ``.py`` name in the second column is
relative to the row's package (or the module's directory), or to ``shardprep/`` when it holds a ``/``.
A package's ``__init__.py`` belongs to its row.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shardprep"
MAX_MODULE_LINES = 400
MAX_ALLOWED_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
# module -> why it is one concern of more than MAX_MODULE_LINES (up to MAX_ALLOWED_MODULE_LINES): a module is
# split by concern, never by length; an entry whose module is back under the cap is stale and fails.
MODULE_ALLOWED: dict[str, str] = {}
# (module, qualified function name) -> why it may be longer; keep this empty or very short.
FUNCTION_ALLOWED: dict[tuple[str, str], str] = {}

_CODE = re.compile(r"`([^`]+)`")


def _library_modules() -> list[PurePosixPath]:
    return sorted(PurePosixPath(p.relative_to(PACKAGE).as_posix()) for p in PACKAGE.rglob("*.py"))


@functools.lru_cache(maxsize=None)
def _syntax(module: PurePosixPath) -> ast.Module:
    """A library module's syntax tree, parsed once for all the checks below (read, never changed)."""
    return ast.parse((PACKAGE / module).read_text(encoding="utf-8"))


def _tree(source: str | ast.Module) -> ast.Module:
    return source if isinstance(source, ast.Module) else ast.parse(source)


def _table_rows(text: str) -> list[tuple[str, str]]:
    """(first cell, second cell) of every row of the table under "## Modules"."""
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 2 and not set(cells[0]) <= set("-: ") and cells[0] != "module":
            rows.append((cells[0], cells[1]))
    return rows


def table_paths(text: str) -> tuple[set[PurePosixPath], set[PurePosixPath]]:
    """(modules, packages) the table names, as paths relative to ``shardprep/`` (packages end in ``/``
    in the table and are returned as their directory)."""
    modules: set[PurePosixPath] = set()
    packages: set[PurePosixPath] = set()
    for first, concern in _table_rows(text):
        named = _CODE.findall(first)
        if not named:
            raise AssertionError(f"docs/architecture.md: the row {first!r} names no module or package")
        for name in named:
            if name.endswith("/"):
                packages.add(PurePosixPath(name))
            elif name.endswith(".py"):
                modules.add(PurePosixPath(name))
            else:
                raise AssertionError(f"docs/architecture.md: {name!r} is neither a module (.py) nor a package (/)")
        base = PurePosixPath(named[0]) if named[0].endswith("/") else PurePosixPath(named[0]).parent
        for name in _CODE.findall(concern):
            if name.endswith(".py") and " " not in name:
                modules.add(PurePosixPath(name) if "/" in name else base / name)
    return modules, packages


def test_table_paths_reads_the_convention():
    text = ("# A\n\n## Modules\n\n| module | concern |\n|---|---|\n| `a.py` | one (`b.py` re-exports it) |\n"
            "| `pkg/` | `x.py` (one), `pkg/y.py`, `Thing`, `pkg.sub` |\n| `pkg/z.py`, `pkg/w.py` | two |\n"
            "\n## Next\n\n| `ignored.py` | after the section |\n")
    modules, packages = table_paths(text)
    assert modules == {PurePosixPath(p) for p in ("a.py", "b.py", "pkg/x.py", "pkg/y.py", "pkg/z.py", "pkg/w.py")}
    assert packages == {PurePosixPath("pkg")}


def test_every_module_is_in_the_architecture_table_and_every_named_path_exists():
    modules, packages = table_paths((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    tree = _library_modules()
    unnamed = [str(m) for m in tree if m.name != "__init__.py" and m not in modules]
    assert not unnamed, f"modules missing from the table in docs/architecture.md: {unnamed}"
    missing = sorted(str(p) for p in modules if not (PACKAGE / p).is_file())
    missing += sorted(f"{p}/" for p in packages if not (PACKAGE / p / "__init__.py").is_file())
    assert not missing, f"docs/architecture.md names paths that do not exist under shardprep/: {missing}"
    # every package has a row of its own or rows for its modules
    covered = packages | {m.parent for m in modules}
    unlisted = sorted(str(m.parent) for m in tree if m.name == "__init__.py" and m.parent not in covered
                      and m.parent != PurePosixPath("."))
    assert not unlisted, f"packages with no row in docs/architecture.md: {unlisted}"


def test_no_library_module_is_over_400_lines_but_the_reasoned_few():
    sizes = {str(m): len((PACKAGE / m).read_text(encoding="utf-8").splitlines()) for m in _library_modules()}
    over = {m: n for m, n in sizes.items() if n > (MAX_ALLOWED_MODULE_LINES if m in MODULE_ALLOWED else MAX_MODULE_LINES)}
    assert not over, (f"modules over {MAX_MODULE_LINES} lines (split them by concern, or name one concern that "
                      f"needs up to {MAX_ALLOWED_MODULE_LINES} in MODULE_ALLOWED with its reason): {over}")
    stale = [m for m in MODULE_ALLOWED if sizes.get(m, 0) <= MAX_MODULE_LINES]
    assert not stale, f"MODULE_ALLOWED names modules that are no longer over {MAX_MODULE_LINES} lines: {stale}"
    assert len(sizes) > 50 and max(sizes.values()) > 300     # the walk did see the library


def long_functions(source: str | ast.Module, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines from its first decorator to its last line) of every function over ``limit``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    lines = (child.end_lineno or child.lineno) - first + 1
                    if lines > limit:
                        found.append((name, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(_tree(source), "")
    return found


def test_long_functions_counts_decorators_and_nested_functions():
    body = "\n".join(f"            x{i} = {i}" for i in range(3))
    source = f"class C:\n    @staticmethod\n    def f():\n        def g():\n{body}\n{body}\n        return 1\n"
    assert long_functions(source, limit=9) == [("C.f", 10)]
    assert long_functions(source, limit=6) == [("C.f", 10), ("C.f.g", 7)]
    assert long_functions(source, limit=10) == []


def test_no_library_function_is_over_60_lines():
    long = {(str(m), name): lines for m in _library_modules()
            for name, lines in long_functions(_syntax(m))}
    found = {k: n for k, n in long.items() if k not in FUNCTION_ALLOWED}
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {found}"
    stale = [k for k in FUNCTION_ALLOWED if k not in long]
    assert not stale, f"FUNCTION_ALLOWED names functions that are no longer over the limit: {stale}"
    assert len(FUNCTION_ALLOWED) <= 2


# Issue 24 (1): the layers below the plan never reach up.  (package, packages it must not import), checked on
# every import statement of the package's modules, lazy ones included: a back arrow inside a function is
# still a back arrow.
FORBIDDEN_IMPORTS = {
    "shard": ("job", "loader", "executor", "cli"),
    "inputs": ("job", "loader", "executor", "cli"),
    "storage": ("job", "loader", "executor", "cli"),
    "job": ("loader",),
}


def imported_packages(source: str | ast.Module) -> set[str]:
    """The ``shardprep`` subpackages (first component after ``shardprep.``) a module's imports name."""
    found: set[str] = set()
    for node in ast.walk(_tree(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "shardprep"]
        for name in names:
            parts = name.split(".")
            if parts[0] == "shardprep" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_imported_packages_sees_lazy_and_from_imports():
    source = ("import os\nfrom shardprep.job.schema import Job\ndef f():\n    import shardprep.loader.index\n"
              "    from shardprep import cli\n")
    assert imported_packages(source) == {"job", "loader", "cli"}


def test_lower_layers_never_import_upper_ones():
    back = []
    for m in _library_modules():
        package = m.parts[0] if len(m.parts) > 1 else None
        forbidden = FORBIDDEN_IMPORTS.get(package or "", ())
        used = imported_packages(_syntax(m))
        back += [f"{m} imports shardprep.{p}" for p in sorted(used) if p in forbidden]
    assert not back, "imports that run back up the layers (docs/architecture.md, 'Layers'):\n" + "\n".join(back)


# Issue 30 (4): what a reader of our shards pays.  A third-party reader needs the index, the sidecars and the
# ranged reads: the records and the format, never the input readers, the tokenizer, the plan or a store.
SHARD_READER_MODULES = ("shardprep.shard.sidecar", "shardprep.shard.index", "shardprep.shard.reader")
MAX_SHARD_READER_LOAD = 8


def loaded_by(module: str) -> list[str]:
    """The shardprep modules a fresh interpreter holds after ``import module``."""
    import subprocess
    import sys

    code = (f"import sys, {module}; "
            "print(sorted(m for m in sys.modules if m == 'shardprep' or m.startswith('shardprep.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return ast.literal_eval(out.stdout.strip())


def test_reading_our_shards_loads_a_handful_of_modules():
    heavy = {m: loaded for m in SHARD_READER_MODULES if len(loaded := loaded_by(m)) > MAX_SHARD_READER_LOAD}
    assert not heavy, f"importing these loads more than {MAX_SHARD_READER_LOAD} shardprep modules: {heavy}"


# Issue 30 (4): no import cycle between files.  Every import statement counts (lazy ones inside functions and
# those under TYPE_CHECKING too: a cycle that only laziness keeps from failing is still two modules that
# cannot be read, tested or moved apart).  A cycle that stays is named here with its reason; the list stays
# minimal (an entry that is no longer a cycle fails), and never holds one in storage/ or job/.
CYCLES_ALLOWED: dict[frozenset[str], str] = {
    frozenset({"inputs.discover", "inputs.planned", "inputs.remote"}):
        "a URL input is expanded (remote.py) into InputFiles (discover.py), whose planned reads open it "
        "(planned.py); discover.py expands URLs through remote.py (the back imports are lazy)",
    frozenset({"inputs.readers", "inputs.batches", "inputs.fastpath", "inputs.fields", "inputs.health",
               "inputs.tabular"}):
        "readers.py defines the bad-input policy the batched readers apply, and its iter_documents reads one "
        "document at a time through them (one lazy import), so the policy has one definition and one reader",
    frozenset({"tokenizer.backend", "tokenizer.plan_check"}):
        "backend selection asks whether the plan's check may be trusted, and the check names the backends "
        "it compares (both lazy)",
    frozenset({"loader.mixture", "loader.mixstate"}):
        "a Mixture starts its per-source Segment (lazy), and a Segment resumes against its Mixture "
        "(a type only)",
}
NO_CYCLES_IN = ("storage", "job")


def _module_name(path: PurePosixPath) -> str:
    """``job/schema/__init__.py`` -> ``job.schema``; ``units.py`` -> ``units`` (relative to ``shardprep``)."""
    parts = list(path.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, frozenset[str]]:
    """Module -> the shardprep modules its import statements name (all of them: lazy and TYPE_CHECKING
    included); ``from pkg import name`` names the module ``pkg.name`` when there is one, else ``pkg``."""
    modules = {_module_name(m): m for m in _library_modules()}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def named(node: ast.AST, package: str) -> list[str | None]:
        if isinstance(node, ast.Import):
            return [known(a.name.removeprefix("shardprep.")) for a in node.names if a.name.startswith("shardprep.")]
        if not isinstance(node, ast.ImportFrom):
            return []
        if node.level:                    # relative: from the module's package, one level up per extra dot
            source = package
            for _ in range(node.level - 1):
                source = source.rpartition(".")[0]
            source = ".".join(p for p in (source, node.module or "") if p)
        elif node.module and (node.module + ".").startswith("shardprep."):
            source = node.module.removeprefix("shardprep").removeprefix(".")
        else:
            return []
        subs = [f"{source}.{a.name}".lstrip(".") for a in node.names]
        return [sub if sub in modules else known(source) for sub in subs]

    graph: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = frozenset(m for node in ast.walk(_syntax(path)) for m in named(node, package) if m and m != name)
    return graph


def import_cycles(graph: Mapping[str, AbstractSet[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
                    cycles.append(frozenset(component))
    return cycles


def test_import_cycles_finds_each_circle_once_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}, "g": {"a"}}
    assert sorted(map(sorted, import_cycles(graph))) == [["a", "b", "c"], ["e", "f"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_reads_lazy_type_checking_and_submodule_imports():
    graph = import_graph()
    assert "shard.provenance" in graph["shard.sidecar"]                  # from shardprep.shard.provenance import
    assert "storage.locations" in graph["shard.index"]                   # lazy, inside a function
    assert "job.schema" in graph["job.sizing"]                           # under TYPE_CHECKING


def test_no_import_cycle_between_files_but_the_reasoned_few():
    cycles = import_cycles(import_graph())
    new = [sorted(c) for c in cycles if c not in CYCLES_ALLOWED]
    assert not new, "import cycles between files (break them: move the shared record or constant to a leaf):\n" + \
        "\n".join(" <-> ".join(c) for c in new)
    stale = [sorted(c) for c in CYCLES_ALLOWED if c not in cycles]
    assert not stale, f"CYCLES_ALLOWED names cycles that are gone (remove them): {stale}"
    forbidden = [sorted(c) for c in CYCLES_ALLOWED if any(m.split(".")[0] in NO_CYCLES_IN for m in c)]
    assert not forbidden, f"no cycle may be allowed in {NO_CYCLES_IN}: {forbidden}"
