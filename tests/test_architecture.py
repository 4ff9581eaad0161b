"""Issue 11's acceptance, kept true: the module table in docs/architecture.md matches the tree, no library
module is over 400 lines and no library function over 60.

The table's convention (stated above it in docs/architecture.md): a row names modules (``path.py``) or a
package (``pkg/``) in its first column, relative to ``shardprep/``; a ``.py`` name in the second column is
relative to the row's package (or the module's directory), or to ``shardprep/`` when it holds a ``/``.
A package's ``__init__.py`` belongs to its row.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shardprep"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# (module, qualified function name) -> why it may be longer; keep this empty or very short.
FUNCTION_ALLOWED: dict[tuple[str, str], str] = {}

_CODE = re.compile(r"`([^`]+)`")


def _library_modules() -> list[PurePosixPath]:
    return sorted(PurePosixPath(p.relative_to(PACKAGE).as_posix()) for p in PACKAGE.rglob("*.py"))


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


def test_no_library_module_is_over_400_lines():
    sizes = {str(m): len((PACKAGE / m).read_text(encoding="utf-8").splitlines()) for m in _library_modules()}
    over = {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {over}"
    assert len(sizes) > 50 and max(sizes.values()) > 300     # the walk did see the library


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
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

    visit(ast.parse(source), "")
    return found


def test_long_functions_counts_decorators_and_nested_functions():
    body = "\n".join(f"            x{i} = {i}" for i in range(3))
    source = f"class C:\n    @staticmethod\n    def f():\n        def g():\n{body}\n{body}\n        return 1\n"
    assert long_functions(source, limit=9) == [("C.f", 10)]
    assert long_functions(source, limit=6) == [("C.f", 10), ("C.f.g", 7)]
    assert long_functions(source, limit=10) == []


def test_no_library_function_is_over_60_lines():
    long = {(str(m), name): lines for m in _library_modules()
            for name, lines in long_functions((PACKAGE / m).read_text(encoding="utf-8"))}
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


def imported_packages(source: str) -> set[str]:
    """The ``shardprep`` subpackages (first component after ``shardprep.``) a module's imports name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
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
        used = imported_packages((PACKAGE / m).read_text(encoding="utf-8"))
        back += [f"{m} imports shardprep.{p}" for p in sorted(used) if p in forbidden]
    assert not back, "imports that run back up the layers (docs/architecture.md, 'Layers'):\n" + "\n".join(back)


def test_reading_a_shard_loads_a_handful_of_modules():
    """``import shardprep.shard.reader`` (what a third-party reader of our shards pays) stays a leaf:
    no records, no tokenizer, no input readers, no stores."""
    import subprocess
    import sys

    code = ("import sys, shardprep.shard.reader; "
            "print(sorted(m for m in sys.modules if m == 'shardprep' or m.startswith('shardprep.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = ast.literal_eval(out.stdout.strip())
    assert len(loaded) <= 6, loaded
