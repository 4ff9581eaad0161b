"""docs/architecture.md's exit-code table matches the code: every documented code is a named code in
shardprep/errors.py that something really exits with, and every error class's code is documented."""

from __future__ import annotations

import re
from pathlib import Path

import shardprep
from shardprep import errors

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(shardprep.__file__).parent


def _documented() -> dict[int, str]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.MULTILINE)
    assert rows, "no exit-code table under '## Exit codes'"
    return {int(code): meaning for code, meaning in rows}


def _named() -> dict[str, int]:
    return {name: value for name, value in vars(errors).items() if name.startswith("EXIT_")}


def _error_classes() -> list[type]:
    out, todo = [], [errors.ShardprepError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def _used_outside_errors_py(name: str) -> bool:
    """Whether the code's name is used by some module other than errors.py (the CLI, doctor, ...)."""
    return any(re.search(rf"\b{name}\b", p.read_text(encoding="utf-8"))
               for p in PACKAGE.rglob("*.py") if p.name != "errors.py" or p.parent != PACKAGE)


def test_the_table_lists_exactly_the_named_codes():
    documented, named = _documented(), _named()
    assert sorted(documented) == sorted(set(named.values())), (sorted(documented), named)
    assert len(set(named.values())) == len(named), "two names for one exit code"
    assert {0, 1, 2, 75, 130} <= set(documented)


def test_every_error_class_exits_with_a_documented_code():
    documented = _documented()
    for cls in _error_classes():
        assert cls.exit_code in documented, (cls.__name__, cls.exit_code)


def test_every_documented_code_is_used():
    """0 and 1 are what any Python program exits with (success; an uncaught exception, our bugs); each
    other code is the code of an error class or is returned by name (CLI boundary, status, doctor)."""
    by_classes = {cls.exit_code for cls in _error_classes() if cls is not errors.ShardprepError}
    for name, code in _named().items():
        if code in (0, 1):
            continue
        assert code in by_classes or _used_outside_errors_py(name), f"{name} = {code} is documented but unused"


def test_the_batch_script_exit_codes_are_documented():
    """tokenize.sbatch exits 75 to have a task requeued and 5 when it gave up after --max-requeues."""
    script = (PACKAGE / "templates" / "tokenize.sbatch").read_text(encoding="utf-8")
    codes = {int(c) for c in re.findall(r"^\s*exit (\d+)$", script, flags=re.MULTILINE)}
    assert codes == {errors.EXIT_REQUEUE, errors.EXIT_INCOMPLETE}
    assert codes <= set(_documented())
