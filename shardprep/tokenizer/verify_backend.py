"""The ``auto`` check: a fast backend must reproduce the reference (``hf``) ids exactly before it is used.

Why both fixed hard cases and the task's own documents: the hard cases cover what breaks re-implemented
tokenizers (whitespace runs, scripts without spaces, grapheme clusters, digit splitting, pathological
word lengths, special-token strings, control characters) even when a task's text happens to avoid them;
the sample covers whatever this particular corpus contains.  One mismatching id anywhere fails the check,
and the record of what differed goes into the shard sidecar so the fallback is explainable.

The check costs one reference encode of the hard cases and the sample (bounded by ``max_sample_chars``).
The hard cases are the same for every task of a job, so the plan runs them once (``plan_check``) and a
task whose libraries and tokenizer match that record encodes only its own sample (~30 ms with GPT-2).
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Protocol

import numpy as np
import orjson

from shardprep.shard.provenance import CheckRecord, Mismatch

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.shard.provenance import PlanCheck

DEFAULT_SAMPLE_DOCS = 128
DEFAULT_SAMPLE_CHARS = 128 * 1024
_SHOW_IDS = 8            # ids either side of the first difference kept in the record
_SHOW_CHARS = 120        # characters of the offending text kept in the record

# Strings that are special tokens in common tokenizers; in raw text they must stay plain text (unless the
# job allows special tokens) under every backend.
_COMMON_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<pad>", "[CLS]",
                    "[SEP]", "[MASK]", "<|begin_of_text|>", "<|eot_id|>", "<bos>", "<eos>")

_HARD_CASES: tuple[tuple[str, str], ...] = (
    ("whitespace: runs of spaces", "a  b   c    d" + " " * 40 + "e"),
    ("whitespace: tabs and newlines", "\tx\t\ty\n\nz\n\n\n  \n\t \n w"),
    ("whitespace: leading and trailing", "   leading and trailing   "),
    ("whitespace: only", " \t  \n "),
    ("whitespace: CRLF", "line one\r\nline two\r\n\r\nline three\r"),
    ("whitespace: unicode spaces", "no\u00a0break\u2003em\u3000ideographic\u2028line\u2029para\u0085nel"),
    ("CJK: Chinese", "中文文本同样需要被正确地切分。我们在北京大学学习自然语言处理。"),
    ("CJK: Japanese", "日本語のテキストも正しく処理されます。カタカナとひらがなと漢字。"),
    ("Korean", "한국어 문장은 토크나이저에게 어려운 경우입니다. 서울특별시에서 만나요!"),
    ("scripts: Arabic, Hebrew, Devanagari, Thai", "مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก"),
    ("Latin diacritics and combining marks", "Ünïcödé façade naïve café — déjà vu; e\u0301 a\u0308 n\u0303"),
    ("emoji", "Emoji 😀😃😄 🚀 and ✨ sparkles ❤️"),
    ("emoji: ZWJ sequences", "👩‍👩‍👧‍👦 family 👨‍💻 coder 🏳️‍🌈 flag 🧑🏽‍🚀"),
    ("emoji: skin tones and flags", "👍🏽 👋🏿 🇺🇸🇯🇵🇰🇷 🏴󠁧󠁢󠁳󠁣󠁴󠁿"),
    ("digits", "1234567890 3.14159 2026-11-22 1,000,000 0x1F 007 12345678901234567890"),
    ("digits: non-ASCII", "٠١٢٣٤٥٦٧٨٩ ०१२३ ０１２３ ½ ² ⅷ"),
    ("contractions and case", "I'm you're he'll we'd they've DON'T It'S O'Neil's"),
    ("punctuation runs", "!!!??? ... --- ___ *** ``` ''' \"\"\" <<<>>> {{{}}} ((())) @@@ ### $$$"),
    ("code", "def f(x):\n    return x**2  # comment\n\tif (a && b) { c->d[0] = 'e'; }"),
    ("URL and email", "https://example.org/a/b?c=d&e=f#g user.name+tag@example.com"),
    ("control characters", "a\x00b\x01c\x07d\x08e\x0bf\x0cg\x1b[31mred\x1b[0m\x7fh"),
    ("zero-width and format characters", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u2060wj\u00adsoft"),
    ("private use and astral", "\ue000\uf8ff \U0001d54f\U0001d552\U0001d55b \U00020000\U0002a6d6"),
    ("replacement and noncharacters", "\ufffd\ufffe\uffff bad\ufffdbytes"),
    ("very long word: ASCII", "a" * 10_000),
    ("very long word: mixed", "supercalifragilistic" * 300),
    ("very long word: CJK", "漢字" * 2_000),
    ("very long word: digits", "9" * 5_000),
    ("very long word: emoji", "😀" * 1_000),
    ("very long whitespace", " " * 5_000 + "x" + "\n" * 2_000 + "y"),
)


class _Encoder(Protocol):
    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]: ...

    def describe(self) -> dict: ...


_ADDED_KEY = re.compile(r'"added_tokens"\s*:\s*')


def added_tokens_span(tokenizer_json: str) -> tuple[list[dict], int, int] | None:
    """The ``added_tokens`` list and where its JSON text starts and ends, without parsing the rest.

    ``tokenizers`` serialises ``added_tokens`` before the vocabulary, so the first match is the top-level
    key; parsing only that array saves ~30 ms per task over loading the whole 1-4 MB document.  None when
    the text does not look like that (callers then parse everything).
    """
    m = _ADDED_KEY.search(tokenizer_json)
    if m is None:
        return None
    try:
        added, end = json.JSONDecoder().raw_decode(tokenizer_json, m.end())
    except ValueError:
        return None
    if not isinstance(added, list) or not all(isinstance(t, dict) for t in added):
        return None
    return added, m.end(), end


def special_token_cases(tokenizer_json: str) -> list[tuple[str, str]]:
    """Texts embedding the tokenizer's own added-token strings plus common special-token strings."""
    span = added_tokens_span(tokenizer_json)
    if span is not None:
        added = span[0]
    else:
        try:
            added = orjson.loads(tokenizer_json).get("added_tokens") or []
        except orjson.JSONDecodeError:
            added = []
    own = [t["content"] for t in added if isinstance(t, dict) and isinstance(t.get("content"), str)]
    strings = list(dict.fromkeys(own + list(_COMMON_SPECIALS)))
    cases = [("special-token strings: inline", "text " + " and ".join(strings) + " more text"),
             ("special-token strings: glued", "x".join(strings) + "".join(strings))]
    for s in own[:64]:
        cases.append((f"special-token string {s!r}", f"{s}start {s} middle{s}end {s}"))
    return cases


# Byte-level BPE vocabularies spell every byte as one of 256 characters, all below U+0144; an entry with
# any other character is written in plain Unicode instead.  ``tokenizers`` never reaches such an entry
# through the byte-level pre-tokenizer, but a re-implementation that maps entries to their bytes sees two
# entries with the same bytes (Cohere: '™' = 266 and its byte-level spelling 'âĦ¢' = 11538) and may keep
# either, differently from one load to the next.  Those texts make the check decide for every such entry.
_OUTSIDE_BYTE_ALPHABET = re.compile("[^\x00-\u0143]")
_VOCAB_START = re.compile(r'"vocab"\s*:\s*\{')
_MERGES_KEY = re.compile(r'"merges"\s*:')


def _key_around(region: str, pos: int) -> tuple[str, int] | None:
    """The JSON object key containing ``region[pos]`` and where it ends, or None if that is unclear."""
    start = pos
    while True:
        start = region.rfind('"', 0, start)
        if start < 0:
            return None
        if region[start - 1] != "\\":
            break
    try:
        key, end = json.JSONDecoder().raw_decode(region, start)
    except ValueError:
        return None
    if not isinstance(key, str) or end <= pos or region[end:end + 8].lstrip()[:1] != ":":
        return None
    return key, end


def byte_alphabet_outliers(tokenizer_json: str) -> list[str]:
    """Vocabulary entries of a byte-level BPE that are not written in the byte alphabet (usually none).

    Scans the vocabulary's JSON text instead of parsing the whole 1-8 MB document (~10 ms against 50-200
    ms); parses everything only when the text does not look like ``tokenizers`` writes it.
    """
    if '"ByteLevel"' not in tokenizer_json:
        return []
    start = _VOCAB_START.search(tokenizer_json)
    stop = _MERGES_KEY.search(tokenizer_json, start.end()) if start else None
    if start is None or stop is None:
        return _outliers_parsed(tokenizer_json)
    region = tokenizer_json[start.end() - 1:stop.start()]
    found: dict[str, None] = {}
    end = 0
    for m in _OUTSIDE_BYTE_ALPHABET.finditer(region):
        if m.start() < end:
            continue                      # another character of the key just read
        key = _key_around(region, m.start())
        if key is None:
            return _outliers_parsed(tokenizer_json)
        found[key[0]] = None
        end = key[1]
    return list(found)


def _outliers_parsed(tokenizer_json: str) -> list[str]:
    vocab = (orjson.loads(tokenizer_json).get("model") or {}).get("vocab")
    return [k for k in vocab if _OUTSIDE_BYTE_ALPHABET.search(k)] if isinstance(vocab, dict) else []


def hard_cases(tokenizer_json: str) -> list[tuple[str, str]]:
    """(label, text) pairs every fast backend must reproduce; includes the tokenizer's own specials and
    any vocabulary entries outside the byte alphabet (in groups of 64, spaced and glued)."""
    outliers = byte_alphabet_outliers(tokenizer_json)
    groups = [outliers[i:i + 64] for i in range(0, len(outliers), 64)]
    odd = [(f"vocabulary entries outside the byte alphabet ({how}, group {g})", sep.join(group))
           for g, group in enumerate(groups) for how, sep in (("spaced", " "), ("glued", ""))]
    return list(_HARD_CASES) + special_token_cases(tokenizer_json) + odd


def sample_of(texts: list[str], *, max_docs: int = DEFAULT_SAMPLE_DOCS,
              max_chars: int = DEFAULT_SAMPLE_CHARS) -> list[int]:
    """Indices of evenly spaced documents, at most ``max_docs`` and about ``max_chars`` characters.

    Evenly spaced rather than the first few: files often start with boilerplate unlike their body.
    A document longer than the budget is still taken when nothing else was (long documents are where
    re-implementations diverge), but never more than one such.
    """
    if not texts:
        return []
    step = max(1, len(texts) // max_docs)
    chosen: list[int] = []
    total = 0
    for i in range(0, len(texts), step):
        n = len(texts[i])
        if total + n > max_chars and chosen:
            continue
        chosen.append(i)
        total += n
        if len(chosen) >= max_docs or total >= max_chars:
            break
    return chosen


def _first_difference(expected: np.ndarray, got: np.ndarray) -> int:
    n = min(len(expected), len(got))
    diff = np.flatnonzero(expected[:n] != got[:n])
    return int(diff[0]) if diff.size else n


def _per_doc(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []


Difference = tuple[str, Mismatch | None]     # (why, the first document that differed when one did)


def _mismatch(cases: list[tuple[str, str]], expected_docs: list[np.ndarray],
              got_docs: list[np.ndarray]) -> Difference:
    """The first document whose ids differ."""
    for i, (exp, got) in enumerate(zip(expected_docs, got_docs)):
        if np.array_equal(exp, got):
            continue
        pos = _first_difference(exp, got)
        lo = max(0, pos - _SHOW_IDS)
        label = cases[i][0]
        return (f"ids differ on {label} at token {pos} ({len(got)} vs {len(exp)} tokens)",
                Mismatch(label, cases[i][1][:_SHOW_CHARS], pos, tuple(exp[lo:pos + _SHOW_IDS].tolist()),
                         tuple(got[lo:pos + _SHOW_IDS].tolist())))
    return "ids differ", None  # pragma: no cover - array_equal and per-document equality disagree


def compare_ids(candidate: _Encoder, reference: _Encoder, cases: list[tuple[str, str]]) -> Difference | None:
    """Encode ``cases`` with both; None when identical, else the first difference."""
    return compare_with_expected(candidate, cases, reference.encode_batch([t for _, t in cases]))


def compare_with_expected(candidate: _Encoder, cases: list[tuple[str, str]],
                          expected: tuple[np.ndarray, np.ndarray]) -> Difference | None:
    """``compare_ids`` where the reference's ``(flat ids, lengths)`` of ``cases`` are already known."""
    ref_flat, ref_len = expected
    texts = [t for _, t in cases]
    try:
        got_flat, got_len = candidate.encode_batch(texts)
    except Exception as e:
        return f"{candidate.describe()['name']} raised {type(e).__name__}: {str(e)[:200]}", None
    if np.array_equal(ref_len, got_len) and np.array_equal(ref_flat, got_flat):
        return None
    expected_docs, got_docs = _per_doc(ref_flat, ref_len), _per_doc(got_flat, got_len)
    if len(expected_docs) != len(got_docs):
        return f"returned {len(got_docs)} documents for {len(expected_docs)} inputs", None
    return _mismatch(cases, expected_docs, got_docs)


def compare_recorded(reference: _Encoder, cases: list[tuple[str, str, np.ndarray]]) -> Difference | None:
    """``compare_ids`` for documents the candidate has already encoded: (label, text, the ids it gave)."""
    if not cases:
        return None
    ref_flat, ref_len = reference.encode_batch([t for _, t, _ in cases])
    got = [np.asarray(ids, dtype=np.uint32) for _, _, ids in cases]
    expected = _per_doc(ref_flat, ref_len)
    if all(np.array_equal(e, g) for e, g in zip(expected, got)):
        return None
    return _mismatch([(label, text) for label, text, _ in cases], expected, got)


def verify_backend(candidate: _Encoder, reference: _Encoder, tokenizer_json: str, sample_texts: list[str], *,
                   max_sample_docs: int = DEFAULT_SAMPLE_DOCS, max_sample_chars: int = DEFAULT_SAMPLE_CHARS,
                   planned: PlanCheck | None = None, planned_ignored: str = "",
                   recorded: list[tuple[str, str, np.ndarray]] | None = None) -> CheckRecord:
    """Compare ``candidate`` with ``reference`` on the hard cases, a sample of ``sample_texts`` and the
    ``recorded`` documents (ones the candidate already encoded in the task: label, text, its ids).

    ``planned`` is the plan's hard-case outcome when this task may trust it (``plan_check``): the hard
    cases are then not encoded again (a recorded failure fails at once); ``planned_ignored`` says why a
    plan's record was not trusted.  Returns the sidecar's ``backend.check``: ``passed``, what was compared,
    where the hard cases were checked (``plan`` or ``task``), how long it took and, on failure, ``reason``
    and the first mismatch.
    """
    started = time.perf_counter()
    ref = reference.describe()
    label = f"{ref['name']} {ref.get('version', '')}".strip()
    if planned is not None and not planned.passed:
        return CheckRecord(False, reference=label, hard_cases=planned.hard_cases, hard_cases_checked="plan",
                           sample_documents=0, sample_chars=0, elapsed_s=round(time.perf_counter() - started, 3),
                           reason=f"{planned.reason} (hard cases checked at plan time)", mismatch=planned.mismatch)
    fixed = [] if planned is not None else hard_cases(tokenizer_json)
    picked = sample_of(sample_texts, max_docs=max_sample_docs, max_chars=max_sample_chars)
    cases = fixed + [(f"task document {i} of the first batch", sample_texts[i]) for i in picked]
    recorded = recorded or []
    difference = compare_ids(candidate, reference, cases) if cases else None
    if difference is None:
        difference = compare_recorded(reference, recorded)
    reason, mismatch = difference if difference is not None else (None, None)
    return CheckRecord(
        difference is None, reference=label,
        hard_cases=planned.hard_cases if planned is not None else len(fixed),
        hard_cases_checked="plan" if planned is not None else "task",
        sample_documents=len(picked), sample_chars=sum(len(sample_texts[i]) for i in picked),
        elapsed_s=round(time.perf_counter() - started, 3),
        # documents from every block of the task, with the ids it wrote (job.encode.Sampler)
        spread_documents=len(recorded) if recorded else None,
        spread_chars=sum(len(t) for _, t, _ in recorded) if recorded else None,
        plan_check_ignored=planned_ignored or None, reason=reason, mismatch=mismatch)
