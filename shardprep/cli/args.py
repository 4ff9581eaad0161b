"""The generic argparse binders of the command line: where parsed values become option objects.

The library takes frozen option dataclasses (``TokenizeOptions``, ``PlanOptions``, ``LocalOptions``,
``SlurmOptions``, ``StageOptions``, ``UploadOptions``, ``ClientOptions``) and never sees argparse.
Defaults live once, in those classes: an option bound to a field with :func:`add_field` takes its
argparse default, and the default ``--help`` shows, from the field.  A test walks the whole parser to
keep every bound default equal to its field's.

Each command's own arguments live with the command (``plan.py``: plan and striping; ``_transfer.py``:
``stage``/``upload``; ``_slurm.py``: executors and Slurm; ``stage.py``: the stage job; ``_s3.py``: the S3
connection).  This module imports no option class and nothing of ``executor/`` or ``storage/``, so every
command (``run-task`` included, once per array task) can use it for the price of a few functions.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable

from shardprep.errors import ConfigError
from shardprep.job.options import parse_size

# --------------------------------------------------------------------------------------- bound defaults


def field_default(owner: type, name: str) -> Any:
    """The default of dataclass field ``name`` of ``owner`` (``default_factory`` called)."""
    for f in dataclasses.fields(owner):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            raise TypeError(f"{owner.__name__}.{name} has no default")
    raise TypeError(f"{owner.__name__} has no field {name!r}")


def add_field(group: Any, *flags: str, owner: type, name: str | None = None,
              shown: Callable[[Any], Any] | None = None, **kwargs: Any) -> argparse.Action:
    """``add_argument`` for an option that sets field ``name`` (default: the flag's dest) of ``owner``.

    The argparse default is the field's default, through ``shown`` when given (``size_text``: ``16M``,
    which argparse passes through ``type`` like a typed value); ``default=argparse.SUPPRESS`` may be
    passed instead for options merged later.  The action remembers ``(owner, name)`` for the test.
    """
    name = name or kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
    default = field_default(owner, name)
    kwargs.setdefault("default", shown(default) if shown else default)
    action = group.add_argument(*flags, **kwargs)
    action.bound_field = (owner, name)
    return action


def from_fields(owner: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """``owner(...)`` from the namespace entries named like its fields (missing ones keep their default)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(owner) if hasattr(args, f.name)}
    return owner(**{**values, **overrides})


def given_fields(owner: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``owner`` the command line set: namespace entries named like them that are not None
    (options with a ``SUPPRESS`` default are absent unless typed); lists become tuples (options are frozen)."""
    values = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(owner)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if v is not None}


def size_arg(text: str) -> int:
    """argparse ``type=`` for byte sizes: a bad value becomes a usage error (exit 2) naming the value."""
    try:
        return parse_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def count_arg(minimum: int = 1) -> Callable[[str], int]:
    """argparse ``type=`` for counts (workers, files, threads ...): an integer of at least ``minimum``.

    Why: ``--workers -2`` used to be accepted and fail later (a traceback from the thread pool) or be
    silently ignored; a bad count is a usage error (exit 2) that names the option and the value.
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is invalid: must be at least {minimum}")
        return value

    parse.__name__ = "count"     # argparse names the type in some messages
    return parse


def size_text(n: int | None) -> str | None:
    """``16777216`` -> ``16M``: a byte count as ``--help`` shows it and :func:`size_arg` reads it back."""
    if n is None:
        return None
    for suffix, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)
