"""Per-input signs that a file is not the text it claims to be.

Why: the bad-input policy skips what it cannot use, one line at a time, and that is right for a few bad
lines in a large corpus.  But a binary file named ``.txt`` (or UTF-16 text, or jsonl read with the wrong
``--text-field``) passes the same way: hundreds of "documents" of control bytes, most lines skipped, exit
0.  So once an input's planned range is read, the reader compares what it skipped with what it kept and
counts NUL bytes (never in UTF-8 text; every other byte in UTF-16), and warns naming the file.

The warning goes to the task log (the Slurm task's output too), into the shard's sidecar as a
``warnings`` list (only when there is one: sidecars of normal inputs are unchanged), to a local
``submit``'s stderr, and into ``doctor``'s input check.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardprep.inputs.discover import InputFile
    from shardprep.inputs.readers import SkipLog, WorkItem

log = logging.getLogger(__name__)

# Skips that say the content is not what was expected (empty lines are normal between paragraphs).
TELLING = ("invalid_utf8", "malformed_json", "missing_field", "too_long")
SKIPPED_FRACTION = 0.2       # warn when at least this share of an input's lines was skipped ...
MIN_SKIPPED = 10             # ... and at least this many (a 3-line file with one bad line is no pattern)


def suspicion(documents: int, skipped: dict[str, int], nul_bytes: int) -> str | None:
    """Why an input read as ``documents`` kept and ``skipped`` (telling reasons) looks wrong, or None."""
    reasons = []
    total_skipped = sum(skipped.values())
    lines = documents + total_skipped
    if total_skipped >= MIN_SKIPPED and total_skipped >= SKIPPED_FRACTION * lines:
        detail = ", ".join(f"{k} {v:,}" for k, v in skipped.items() if v)
        reasons.append(f"{100 * total_skipped / lines:.0f}% of its {lines:,} lines were skipped ({detail})")
    if nul_bytes:
        reasons.append(f"it holds {nul_bytes:,} NUL byte(s), which UTF-8 text never has (binary? UTF-16?)")
    return "; ".join(reasons) or None


class ItemWatch:
    """One item's share of the skip counts, taken before its documents are read; :meth:`finish` warns
    (log and ``skips.warnings``) when what the item kept and skipped looks suspicious."""

    def __init__(self, skips: "SkipLog") -> None:
        self.before = {r: skips.counts[r] for r in TELLING}
        self.nul_before = skips.nul_bytes

    def finish(self, inp: "InputFile", item: "WorkItem", kept: int, skips: "SkipLog") -> None:
        skipped = {r: skips.counts[r] - self.before[r] for r in TELLING}
        nul_bytes = skips.nul_bytes - self.nul_before
        why = suspicion(kept, skipped, nul_bytes)
        if why:
            total = (inp.rows if inp.tabular else inp.size) or 0
            whole = item.start == 0 and (item.end is None or item.end >= total)
            where = inp.path if whole else f"{inp.path} [{item.start}:{item.end}]"
            only_missing_field = not nul_bytes and not any(n for r, n in skipped.items() if r != "missing_field")
            message = f"input {where} {_looks(inp) if only_missing_field else 'looks binary or mis-encoded'}: {why}"
            log.warning("%s", message)
            skips.warnings.append(message)


def _looks(inp: "InputFile") -> str:
    """What an input whose only sign is skipped ``missing_field`` documents lacks (not "binary": the keys
    it has instead, which name the --text-field to choose)."""
    if inp.tabular:
        return "holds no text in most rows of its text column (the values are not strings)"
    from shardprep.inputs.fields import jsonl_head

    keys = jsonl_head(inp, None).keys_text() or "none"
    return f"lacks the text field in most lines (keys seen in its first lines: {keys}; choose one with --text-field)"
