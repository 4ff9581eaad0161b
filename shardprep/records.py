"""Typed, validated reading of the JSON objects inside on-disk records.

Why one reader: job.json, the sidecars and index.json are written by shardprep but read back on other
machines, days later, possibly after a copy between file systems or a hand edit.  A wrong type must fail
where it is read, with the file and the field named ("out/shard-00003.json: field 'chunks.tokens':
expected a list of integers"), not as a KeyError or a silent wrong value three calls later.

Integers are ``int`` and never ``bool`` (JSON ``true`` is not a byte count); floats accept integers.
"""

from __future__ import annotations

import builtins
import codecs
import contextlib
import dataclasses
import functools
import gc
import os
import types
import typing
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, NoReturn, overload

import orjson

from shardprep.errors import IncompleteError, RecordError, ShardprepError

_MISSING = object()
T = typing.TypeVar("T")


def read_record(path: Path, parse: Callable[[bytes, Path], T], *, hint: str) -> T:
    """Read and parse one record file; a missing file is an incomplete output (exit 5) with ``hint``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IncompleteError(f"{path.parent} holds no {path.name}", hint=hint) from None
    return parse(data, path)


def load_json(data: bytes, where: str, what: str) -> "Fields":
    """Parse a whole record file (``what``: "sidecar", "index"...); a clear error when it is torn or not
    a JSON object."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise RecordError(f"{where}: not valid JSON ({e}): torn, or not written by shardprep") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{where}: not a shardprep {what} (a JSON {type(obj).__name__}, not an object)")
    return Fields(obj, where)


class Fields:
    """One JSON object of a record, with the file (``where``) and the dotted field path it sits at."""

    __slots__ = ("obj", "where", "prefix")

    def __init__(self, obj: Any, where: str, prefix: str = "") -> None:
        self.where = where
        self.prefix = prefix
        if not isinstance(obj, dict):
            self.fail_here("expected an object")
        self.obj: dict[str, Any] = obj

    # -- errors -------------------------------------------------------------------------------------
    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def fail(self, key: str, message: str) -> NoReturn:
        raise RecordError(f"{self.where}: field '{self.name(key)}': {message}")

    def fail_here(self, message: str) -> NoReturn:
        what = f"field '{self.prefix}'" if self.prefix else "the document"
        raise RecordError(f"{self.where}: {what}: {message}")

    # -- scalars ------------------------------------------------------------------------------------
    def version(self, key: str, supported: int | tuple[int, ...], *, hint: str) -> int:
        """The record's format version, checked before anything else (another version may differ in shape);
        ``supported``: the one version this shardprep reads, or every version it reads."""
        readable = supported if isinstance(supported, tuple) else (supported,)
        v = self.obj.get(key)
        if type(v) is not int or v not in readable:
            raise RecordError(f"{self.where}: {key} {v!r} is not supported (this shardprep reads version "
                              f"{' or '.join(map(str, readable))})", hint=hint)
        return v

    def has(self, key: str) -> bool:
        return key in self.obj

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        v = self.obj.get(key, _MISSING)
        if v is _MISSING:
            if default is _MISSING:
                self.fail(key, "missing")
            return default
        return v

    def _other(self, key: str, v: Any, expected: str, optional: bool) -> Any:
        """The slow path of the typed readers: null where allowed, else a clear error."""
        if v is _MISSING:
            self.fail(key, "missing")
        if v is None and optional:
            return None
        self.fail(key, f"expected {expected}{' or null' if optional else ''}, got {_short(v)}")

    # The readers below are on the path of every sidecar ``status`` and ``finalize`` read (a hundred
    # thousand at a time): one dict lookup and one type check when the value is right.  The methods are
    # named after the JSON types they read, so the annotations below (resolved in the class) spell the
    # builtins ``builtins.str`` and so on.
    @overload
    def int(self, key: str, *, optional: Literal[False] = False, minimum: int | None = None) -> int: ...
    @overload
    def int(self, key: str, *, optional: bool, minimum: int | None = None) -> int | None: ...

    def int(self, key: str, *, optional: bool = False, minimum: int | None = None) -> int | None:
        v = self.obj.get(key, _MISSING)
        if type(v) is not int:
            return self._other(key, v, "an integer", optional)
        if minimum is not None and v < minimum:
            self.fail(key, f"expected an integer >= {minimum}, got {v}")
        return v

    @overload
    def str(self, key: builtins.str, *, optional: Literal[False] = False,
            choices: tuple[builtins.str, ...] | None = None) -> builtins.str: ...
    @overload
    def str(self, key: builtins.str, *, optional: bool,
            choices: tuple[builtins.str, ...] | None = None) -> builtins.str | None: ...

    def str(self, key: builtins.str, *, optional: bool = False,
            choices: tuple[builtins.str, ...] | None = None) -> builtins.str | None:
        v = self.obj.get(key, _MISSING)
        if type(v) is not str:
            return self._other(key, v, "a string", optional)
        if choices is not None and v not in choices:
            self.fail(key, f"expected one of {', '.join(choices)}, got {_short(v)}")
        return v

    @overload
    def bool(self, key: builtins.str, *, optional: Literal[False] = False) -> builtins.bool: ...
    @overload
    def bool(self, key: builtins.str, *, optional: builtins.bool) -> builtins.bool | None: ...

    def bool(self, key: builtins.str, *, optional: builtins.bool = False) -> builtins.bool | None:
        v = self.obj.get(key, _MISSING)
        return v if type(v) is bool else self._other(key, v, "true or false", optional)

    @overload
    def float(self, key: builtins.str, *, optional: Literal[False] = False) -> builtins.float: ...
    @overload
    def float(self, key: builtins.str, *, optional: builtins.bool) -> builtins.float | None: ...

    def float(self, key: builtins.str, *, optional: builtins.bool = False) -> builtins.float | None:
        v = self.obj.get(key, _MISSING)
        return v if type(v) in (int, float) else self._other(key, v, "a number", optional)

    # -- containers ---------------------------------------------------------------------------------
    def obj_at(self, key: builtins.str) -> Fields:
        return Fields(self.raw(key), self.where, self.name(key))

    def dict(self, key: builtins.str) -> builtins.dict[builtins.str, Any]:
        """A free-form object (informational records such as a sidecar's ``stats``)."""
        v = self.obj.get(key, _MISSING)
        return v if type(v) is dict else self._other(key, v, "an object", False)

    def list(self, key: builtins.str) -> builtins.list[Any]:
        v = self.obj.get(key, _MISSING)
        return v if type(v) is list else self._other(key, v, "a list", False)

    def objects(self, key: builtins.str) -> builtins.list[Fields]:
        name = self.name(key)
        return [Fields(o, self.where, f"{name}[{i}]") for i, o in enumerate(self.list(key))]

    def ints(self, key: builtins.str) -> tuple[builtins.int, ...]:
        v = self.raw(key)
        if type(v) is not list or not all_of(v, int):
            self.fail(key, "expected a list of integers")
        return tuple(v)

    def strs(self, key: builtins.str) -> tuple[builtins.str, ...]:
        v = self.raw(key)
        if type(v) is not list or not all_of(v, str):
            self.fail(key, "expected a list of strings")
        return tuple(v)

    def counts(self, key: builtins.str) -> builtins.dict[builtins.str, builtins.int]:
        """An object of non-negative integer counts (e.g. ``skipped``), keys kept in file order."""
        v = self.dict(key)
        if not all(type(n) is int and n >= 0 for n in v.values()):
            self.fail(key, "expected an object of non-negative integer counts")
        return v


@contextlib.contextmanager
def collector_paused() -> typing.Iterator[None]:
    """Run the block without the cyclic garbage collector (put back as it was after).

    Why: reading a record of a hundred thousand entries (index.json of a large dataset) allocates a few
    hundred thousand small objects, and the collector runs every 700 allocations over a heap that keeps
    growing: a third of the read's time.  Parsed JSON and records hold no reference cycles, so pausing it
    frees nothing late.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def all_of(values: typing.Sequence[Any], kind: type) -> bool:
    """Every element of ``values`` is exactly ``kind`` (bool is not int); set() keeps it at C speed."""
    return not values or set(map(type, values)) == {kind}


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# -- dataclass records ----------------------------------------------------------------------------------
_CHECKS: dict[type, Callable[..., Any]] = {int: Fields.int, str: Fields.str, bool: Fields.bool, float: Fields.float}


def _nested(parse: Callable[[Fields], Any]) -> Callable[..., Any]:
    """The reader of a field holding a nested record (a class with ``parse(Fields)``)."""
    def read(fields: Fields, name: str, *, optional: bool) -> Any:
        if fields.raw(name, None) is None:
            return fields._other(name, None if fields.has(name) else _MISSING, "an object", optional)
        return parse(fields.obj_at(name))
    return read


@functools.cache
def _spec(cls: type) -> tuple[tuple[str, Any, bool, bool], ...]:
    """``(name, reader, optional, has_default)`` per field of a dataclass of scalars (and nested records:
    classes with a ``parse(Fields)``)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.metadata.get("written", True):     # never written (``NOT_WRITTEN``), so never read either
            continue
        t = hints[f.name]
        args = typing.get_args(t) if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union else ()
        base = next((a for a in args if a is not type(None)), t)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        reader = _CHECKS[base] if base in _CHECKS else _nested(base.parse)
        out.append((f.name, reader, type(None) in args, has_default))
    return tuple(out)


def record(cls: type[T], fields: Fields, *, defaults: bool = False) -> T:
    """Build a dataclass of scalars (``InputFile``, ``WorkItem``, ``TokenizeOptions``...; a field may hold a
    nested record whose class has ``parse(Fields)``) from ``fields``.

    Every field must be present with its annotated type, unless ``defaults``: then a missing key takes
    the class default (options added in a later release read from an older job.json).  Errors the class
    itself raises on construction (option validation) are re-raised naming the file.
    """
    values: dict[str, Any] = {}
    # mypy takes ``type[T]`` for unhashable (python/mypy#11470); every class is hashable
    for name, read, optional, has_default in _spec(cls):  # type: ignore[arg-type]
        if defaults and has_default and not fields.has(name):
            continue
        values[name] = read(fields, name, optional=optional)
    try:
        return cls(**values)
    except ShardprepError as e:
        raise RecordError(f"{fields.where}: field '{fields.prefix}': {e}") from None



# -- dataclass records, written ---------------------------------------------------------------------------
# One writer for every record: a record's JSON object is its fields in order (or the order its class names
# in ``JSON_KEYS``, which may also name properties), nested records, tuples and dicts written the same way.
# A field's metadata says where it departs from that, so the rule sits beside the field it is about:
#   ``{"omit": v}``       left out when it equals ``v`` (``OMIT_NONE``: fields added later, absent from old
#                         records, and informational values a run may not have);
#   ``{"encode": fn}``    written as ``fn(value)`` (file names for people: ``printable``);
#   ``{"written": False}`` never written (in-memory state such as an exit code).
OMIT_NONE: Mapping[str, Any] = types.MappingProxyType({"omit": None})
NOT_WRITTEN: Mapping[str, Any] = types.MappingProxyType({"written": False})
_SCALARS = frozenset({str, int, float, bool, type(None)})


@functools.cache
def _dump_spec(cls: type) -> tuple[tuple[str, bool, Any, Callable[[Any], Any] | None], ...]:
    """``(name, omits, omitted value, encode)`` per key of ``cls``'s records, in the order they are written."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    written = [name for name, f in fields.items() if f.metadata.get("written", True)]
    order: tuple[str, ...] = getattr(cls, "JSON_KEYS", tuple(written))
    if set(written) - set(order):
        raise TypeError(f"{cls.__name__}.JSON_KEYS leaves out the fields {sorted(set(written) - set(order))}")
    metas = [fields[name].metadata if name in fields else {} for name in order]
    return tuple((name, "omit" in m, m.get("omit"), m.get("encode")) for name, m in zip(order, metas))


def dump(obj: Any) -> builtins.dict[str, Any]:
    """The JSON object of the dataclass record ``obj`` (rules above), ready for ``orjson.dumps``."""
    out: builtins.dict[str, Any] = {}
    kind: type = type(obj)
    for name, omits, omitted, encode in _dump_spec(kind):
        value = getattr(obj, name)
        if omits and (value is omitted or value == omitted):
            continue
        if encode is not None:
            value = encode(value)
        out[name] = value if type(value) in _SCALARS else _plain(value)     # (most values: no call)
    return out


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is tuple or kind is list:     # a column of scalars (a chunk table) is copied at C speed
        return list(value) if set(map(type, value)) <= _SCALARS else [_plain(v) for v in value]
    if kind is dict:
        return {k: _plain(v) for k, v in value.items()}
    return dump(value) if dataclasses.is_dataclass(value) else value


class Record:
    """A dataclass record that writes itself with :func:`dump` (a base for the on-disk records)."""

    __slots__ = ()

    def to_dict(self) -> builtins.dict[str, Any]:
        return dump(self)

# -- file paths in records ----------------------------------------------------------------------------
# A POSIX file name is bytes.  Python hands over a name that is not valid UTF-8 as a str holding surrogate
# escapes (os.fsdecode), which JSON (orjson) cannot hold: one such input used to crash plan/submit
# (issue 23).  The records that must name a file exactly (the plan: the fingerprint's inputs and
# plan/tasks.jsonl) hold such a path as ``{"fs_bytes_hex": "<its bytes in hex>"}``: a task opens the very
# same file, and no other name can have the same record.  A valid UTF-8 path is stored as itself, so the
# records of ordinary names do not change.  Records and messages for people show such names with ``\xNN``.
PATH_BYTES_KEY = "fs_bytes_hex"


def is_json_text(text: str) -> bool:
    """Can JSON hold ``text`` as it is (no surrogate escapes)?"""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_path(path: str) -> str | builtins.dict[str, str]:
    """``path`` as an exact record holds it (see above)."""
    return path if is_json_text(path) else {PATH_BYTES_KEY: os.fsencode(path).hex()}


def path_from_json(value: Any) -> Any:
    """The inverse of :func:`json_path`; any other value is returned as it is, for the field check to judge."""
    if type(value) is dict and value.keys() == {PATH_BYTES_KEY} and type(value[PATH_BYTES_KEY]) is str:
        try:
            return os.fsdecode(bytes.fromhex(value[PATH_BYTES_KEY]))
        except ValueError:
            return value
    return value


FS_BYTES = "shardprep-fsbytes"     # the codec error handler below: log files and stdout use it too


def _escape_fs_bytes(exc: UnicodeError) -> tuple[str, int]:
    """Encode a file name's undecodable bytes (surrogate escapes U+DC80..U+DCFF) as ``\\xNN``, and any other
    unencodable character as ``backslashreplace`` would."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start:exc.end]
    return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"\\u{ord(c):04x}"
                   for c in bad), exc.end


codecs.register_error(FS_BYTES, _escape_fs_bytes)


def printable(text: str) -> str:
    """``text`` for people and informational records: undecodable bytes of a file name as ``\\xNN``."""
    return text if is_json_text(text) else text.encode("utf-8", FS_BYTES).decode("utf-8")


def printables(texts: tuple[str, ...]) -> list[str]:
    return [printable(t) for t in texts]


# field metadata (``dump``): a file name, or names, written for people
PRINTABLE: Mapping[str, Any] = types.MappingProxyType({"encode": printable})
PRINTABLES: Mapping[str, Any] = types.MappingProxyType({"encode": printables})
