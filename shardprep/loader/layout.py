"""What the loader yields, as one typed value: ``Pack`` rows, ``Pad`` rows or single ``Doc`` documents.

``mode`` and ``seq_len`` are one decision: a ``Pack`` or a ``Pad`` cannot exist without a valid
``seq_len``, so nothing downstream checks it again, and the code that differs by layout dispatches on the
type (``isinstance``, ``match``) instead of comparing strings.  ``layout_of`` is the one place a mode
string becomes a layout (``ShardDataset(mode=...)``, ``shardprep mix --mode``).  Imports nothing of the
loader, so ``batches``, ``assemble``, ``mixture`` and ``shardprep.wds`` all take the same value.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import ClassVar

from shardprep.errors import ConfigError


def _check_seq_len(layout: Pack | Pad | Doc, seq_len: object) -> None:
    """A whole number >= 1 (numpy integers too), stored as a plain int so states compare and serialize."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or int(seq_len) < 1:
        raise ConfigError(f"seq_len={seq_len!r} is invalid: mode={layout.name!r} needs seq_len >= 1")
    object.__setattr__(layout, "seq_len", int(seq_len))


@dataclass(frozen=True)
class Pack:
    """Pretraining rows: ``seq_len`` consecutive tokens of the concatenated document stream."""

    seq_len: int
    name: ClassVar[str] = "pack"
    unit_name: ClassVar[str] = "rows"

    def __post_init__(self) -> None:
        _check_seq_len(self, self.seq_len)


@dataclass(frozen=True)
class Pad:
    """Fine-tuning rows: one document each, truncated to ``seq_len`` and right-padded with ``pad_id``
    (None: the tokenizer's pad id, else its EOS id, else 0; resolved once the dataset is open)."""

    seq_len: int
    pad_id: int | None = None
    name: ClassVar[str] = "pad"
    unit_name: ClassVar[str] = "documents"

    def __post_init__(self) -> None:
        _check_seq_len(self, self.seq_len)
        if self.pad_id is not None:
            if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, numbers.Integral):
                raise ConfigError(f"pad_id={self.pad_id!r} is invalid: must be a token id")
            object.__setattr__(self, "pad_id", int(self.pad_id))


@dataclass(frozen=True)
class Doc:
    """Single documents, unbatched, each exactly once; truncated to ``seq_len`` when one is given."""

    seq_len: int | None = None
    name: ClassVar[str] = "doc"
    unit_name: ClassVar[str] = "documents"

    def __post_init__(self) -> None:
        if self.seq_len is not None:
            _check_seq_len(self, self.seq_len)


Layout = Pack | Pad | Doc
LAYOUTS: dict[str, type[Pack] | type[Pad] | type[Doc]] = {"pack": Pack, "pad": Pad, "doc": Doc}


def layout_of(mode: str, seq_len: object = None, pad_id: object = None) -> Layout:
    """The layout a mode string names; refuses an unknown mode, pack/pad without ``seq_len``, and a
    ``pad_id`` anywhere but pad (the other layouts never pad: the id would be silently unused)."""
    kind = LAYOUTS.get(mode) if isinstance(mode, str) else None
    if kind is None:
        raise ConfigError(f"mode={mode!r} is invalid: one of {tuple(LAYOUTS)}")
    if pad_id is not None and kind is not Pad:
        raise ConfigError(f"pad_id={pad_id!r} is invalid for mode={mode!r}: only mode='pad' pads")
    if kind is Doc:
        return Doc(None if seq_len is None else _whole("seq_len", seq_len))
    if seq_len is None:
        raise ConfigError(f"seq_len=None is invalid: mode={mode!r} needs seq_len >= 1")
    if kind is Pack:
        return Pack(_whole("seq_len", seq_len))
    return Pad(_whole("seq_len", seq_len), None if pad_id is None else _whole("pad_id", pad_id))


def _whole(key: str, value: object) -> int:
    """``int(value)``, as the keyword constructor always took it (``2048.0``, ``"2048"``, a numpy int)."""
    try:
        return int(value)  # type: ignore[call-overload]  # whatever int() takes
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is invalid: must be a whole number") from None


@dataclass(frozen=True)
class ConversationPacking:
    """How pack mode makes rows of chat data (``loader.binpack``): first-fit decreasing over windows of at
    least ``window`` conversations; a conversation longer than ``seq_len`` is ``truncate``d or ``drop``ped.
    Ignored for pretraining data (its rows are cuts of the token stream)."""

    window: int = 1024
    overflow: str = "truncate"

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, numbers.Integral) or int(self.window) < 1:
            raise ConfigError(f"pack_window={self.window!r} is invalid: a number of conversations >= 1")
        if self.overflow not in ("truncate", "drop"):
            raise ConfigError(f"overflow={self.overflow!r} is invalid: 'truncate' or 'drop'")
        object.__setattr__(self, "window", int(self.window))


@dataclass(frozen=True)
class Extras:
    """Optional fields beyond input_ids/labels (/attention_mask)."""

    position_ids: bool = False
    doc_info: bool = False
