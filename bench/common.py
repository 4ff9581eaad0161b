"""Shared pieces of the benchmarks: deterministic corpora, child processes with their own peak RSS, the
machine description, and markdown tables.

Why child processes: every measurement runs in a fresh interpreter so one library's thread pool, caches
or memory never leak into the next measurement, and each child's peak RSS is its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _find_shared() -> Path:
    """``shared/`` beside the checkout; a git worktree sits deeper (``wt/<name>/``), so look upward."""
    return next((p / "shared" for p in REPO.parents if (p / "shared").is_dir()), REPO.parent / "shared")


SHARED = _find_shared()
GPT2 = SHARED / "tokenizers" / "gpt2" / "tokenizer.json"
ENGLISH_SOURCES = ("wikitext2_valid.txt", "wikitext2_test.txt", "tinyshakespeare.txt")
MB = 1 << 20


# -- corpora ----------------------------------------------------------------------------------------
def _english_sentences() -> list[str]:
    """Sentences of the shared English corpus (wikitext split at ' . ', Shakespeare per speech line)."""
    sentences: list[str] = []
    for name in ENGLISH_SOURCES:
        text = (SHARED / "corpus" / name).read_text(encoding="utf-8")
        for line in text.splitlines():
            line = line.strip()
            if not line or (line.startswith("=") and line.endswith("=")):
                continue
            parts = re.split(r"(?<= \.) ", line) if " . " in line else [line]
            sentences.extend(p.strip() for p in parts if len(p.strip()) > 3)
    return list(dict.fromkeys(sentences))


def _write_unique_docs(path: Path, target_bytes: int, make_doc, rng: random.Random) -> dict:
    """Write JSONL documents from ``make_doc(rng)`` until ``target_bytes`` of text, skipping repeats."""
    seen: set[bytes] = set()
    docs = text_bytes = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        while text_bytes < target_bytes:
            doc = make_doc(rng)
            digest = hashlib.blake2b(doc.encode("utf-8"), digest_size=16).digest()
            if digest in seen:
                continue
            seen.add(digest)
            f.write(json.dumps({"id": docs, "text": doc}, ensure_ascii=False).encode("utf-8") + b"\n")
            docs += 1
            text_bytes += len(doc.encode("utf-8"))
    tmp.replace(path)
    return {"documents": docs, "text_bytes": text_bytes, "file_bytes": path.stat().st_size}


def english_corpus(path: Path, target_bytes: int, seed: int = 0) -> dict:
    """Unique documents recombined from the shared English sentences: 4-40 sentences each, mixed sources,
    occasionally split into paragraphs, so documents look like articles of 0.3-6 KB."""
    pool = _english_sentences()

    def make_doc(rng: random.Random) -> str:
        start = rng.randrange(len(pool))
        n = rng.randint(4, 40)
        # mostly consecutive sentences (coherent text), some drawn from anywhere
        picked = [pool[(start + i) % len(pool)] if rng.random() < 0.8 else rng.choice(pool) for i in range(n)]
        out = []
        for i, s in enumerate(picked):
            out.append(s)
            out.append("\n\n" if rng.random() < 0.1 and i < n - 1 else " ")
        return "".join(out).strip()

    return _write_unique_docs(path, target_bytes, make_doc, random.Random(seed))


_SCRIPTS = {
    # name: (alphabet or code point range, min and max letters per word, sentence end)
    "korean": ((0xAC00, 0xD7A3), 1, 4, "."),
    "chinese": ((0x4E00, 0x4E00 + 3000), 1, 3, "。"),
    "japanese": ("ぁあいうえおかがきぎくぐけげこごさざしじすずせぜそぞただちぢつづてでとどなにぬねのはばぱひびぴ"
                 "ふぶぷへべぺほぼぽまみむめもゃやゅゆょよらりるれろわをんアイウエオカキクケコサシスセソタチツテト"
                 "ナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲン日本語学校先生時間東京", 2, 6, "。"),
    "russian": ("абвгдеёжзийклмнопрстуфхцчшщъыьэюя", 2, 10, "."),
    "greek": ("αβγδεζηθικλμνξοπρστυφχψωάέήίόύώ", 2, 9, "."),
    "arabic": ("ابتثجحخدذرزسشصضطظعغفقكلمنهوي", 2, 8, "."),
    "hindi": ("कखगघचछजझटठडढणतथदधनपफबभमयरलवशषसहािीुूेैोौं्", 2, 8, "।"),
    "german": ("abcdefghijklmnopqrstuvwxyzäöüß", 2, 14, "."),
}
_EMOJI = ("😀", "🚀", "✨", "❤️", "👍🏽", "👩‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🧑🏽‍🚀", "🎉")


def _lexicon(rng: random.Random, spec) -> list[str]:
    letters, lo, hi, _ = spec
    if isinstance(letters, tuple):
        letters = "".join(chr(c) for c in range(letters[0], letters[1] + 1))
    words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(lo, hi))) for _ in range(4000)})
    rng.shuffle(words)  # frequency rank must not follow alphabetical order
    return words


def multilingual_corpus(path: Path, target_bytes: int, seed: int = 0) -> dict:
    """Generated documents in eight scripts (Zipf-distributed words from a seeded lexicon per script, so
    frequent words repeat as in real text), with digits, emoji/ZWJ sequences, the sample module's
    multilingual sentences and some English mixed in."""
    from shardprep.demo_data import _MULTILINGUAL

    rng0 = random.Random(seed)
    lexicons = {name: _lexicon(rng0, spec) for name, spec in _SCRIPTS.items()}
    english = _english_sentences()
    weights = [1.0 / (rank + 1) for rank in range(4000)]

    def make_doc(rng: random.Random) -> str:
        name = rng.choice(list(_SCRIPTS))
        words, end = lexicons[name], _SCRIPTS[name][3]
        sep = "" if name in ("chinese", "japanese") else " "
        sentences = []
        for _ in range(rng.randint(3, 20)):
            ws = rng.choices(words, weights=weights[:len(words)], k=rng.randint(4, 18))
            if rng.random() < 0.2:
                ws.insert(rng.randrange(len(ws)), str(rng.randint(0, 10 ** rng.randint(1, 7))))
            if rng.random() < 0.1:
                ws.append(rng.choice(_EMOJI))
            sentences.append(sep.join(ws) + end)
            r = rng.random()
            if r < 0.05:
                sentences.append(rng.choice(_MULTILINGUAL))
            elif r < 0.15:
                sentences.append(rng.choice(english))
        return " ".join(sentences)

    return _write_unique_docs(path, target_bytes, make_doc, random.Random(seed + 1))


def line_corpus(path: Path, target_bytes: int, seed: int = 0) -> dict:
    """One short document per line (~280 bytes: consecutive sentences of the shared English corpus from a
    random start), as plain text: the shape of issue 20's measurements.  Deterministic."""
    pool = _english_sentences()
    rng = random.Random(seed)
    docs = written = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        while written < target_bytes:
            want, start, parts, size = rng.randint(120, 440), rng.randrange(len(pool)), [], 0
            while size < want:
                parts.append(pool[(start + len(parts)) % len(pool)])
                size += len(parts[-1]) + 1
            line = " ".join(parts).encode("utf-8") + b"\n"
            f.write(line)
            docs += 1
            written += len(line)
    tmp.replace(path)
    return {"documents": docs, "bytes": written}


def ensure_corpus(workdir: Path, name: str, target_bytes: int) -> tuple[Path, dict]:
    """Build (or reuse) ``<workdir>/<name>-<MB>.jsonl``; generation is deterministic, so reuse is safe."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}-{target_bytes // MB}mb.jsonl"
    meta_path = path.with_suffix(".meta.json")
    if path.is_file() and meta_path.is_file():
        return path, json.loads(meta_path.read_text())
    make = english_corpus if name == "english" else multilingual_corpus
    meta = make(path, target_bytes)
    meta_path.write_text(json.dumps(meta))
    return path, meta


def read_texts(path: Path) -> list[str]:
    """All documents of a JSONL corpus (for the raw-library measurements, which start from memory)."""
    import orjson

    with open(path, "rb") as f:
        return [orjson.loads(line)["text"] for line in f]


def extract_base(base: str, work: Path) -> tuple[Path, str]:
    """The ``shardprep`` package of ``base`` under ``work/before`` (``git archive``; the repository is
    only read)."""
    commit = subprocess.run(["git", "rev-parse", base], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    target = work / f"before-{commit[:12]}"
    if not (target / "shardprep").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", commit, "shardprep"], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target, commit


# -- child processes --------------------------------------------------------------------------------
@dataclass
class ChildResult:
    result: dict
    wall_s: float
    peak_rss_bytes: int


def run_child(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float = 3600) -> ChildResult:
    """Run ``cmd``; its last stdout line is JSON, including the child's own ``peak_rss_bytes``."""
    full_env = {**os.environ, **(env or {})}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise RuntimeError(f"{' '.join(cmd)} timed out after {timeout}s") from None
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = err.decode(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{tail}")
    lines = [ln for ln in out.decode().splitlines() if ln.strip()]
    result = json.loads(lines[-1]) if lines else {}
    return ChildResult(result, wall, int(result.get("peak_rss_bytes", 0)))


def child_peak_rss() -> int:
    """Peak RSS of this process or of its largest finished child, whichever is higher (for children to
    report; a local executor run's tasks are grandchildren of the bench)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) * 1024


# -- machine and versions ---------------------------------------------------------------------------
def _pkg(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def machine_info() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "versions": {p: _pkg(p) for p in ("shardprep", "tokenizers", "gigatoken", "numpy", "orjson",
                                          "webdataset", "transformers")},
    }


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(out: str | Path, report: str, results: dict) -> None:
    """The markdown report at ``out``, the raw numbers as JSON beside it, and the report on stdout."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    print(report)


def python() -> str:
    return sys.executable
