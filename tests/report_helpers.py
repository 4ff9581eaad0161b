"""Jobs for the report tests, and the report's numbers recomputed independently from the output's files.

``expected_numbers`` never imports ``shardprep.report``: it reads index.json / job.json / sidecars with
orjson and the shards with the plain tar walk, so a report number that drifts from the files fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
from helpers import run_cli

BAD_LINES = [
    "{not json",                                   # malformed_json
    json.dumps({"body": "no text field"}),         # missing_field
    json.dumps({"text": "   "}),                   # empty
]
TRICKY = 'Markup <script>alert("x")</script> & a bell \x07 stays text.'


def write_corpus(raw: Path, files: int = 3, lines: int = 60) -> Path:
    """``files`` txt files plus one jsonl with bad lines and a document full of markup."""
    from shardprep.demo_data import sample_documents

    raw.mkdir(parents=True, exist_ok=True)
    docs = sample_documents(files * lines + 40, seed=7)
    for i in range(files):
        (raw / f"part-{i}.txt").write_text("\n".join(docs[i * lines:(i + 1) * lines]) + "\n", encoding="utf-8")
    rows = [json.dumps({"text": d}) for d in docs[files * lines:]]
    rows.insert(0, json.dumps({"text": TRICKY}))    # the first document of the first shard: a sample
    rows[3:3] = BAD_LINES                            # lines 4-6
    (raw / "mixed.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return raw


def make_job(tmp: Path, tokenizer: Path, *extra: str) -> Path:
    """A finished job (local executor, hf backend) over ``write_corpus``."""
    out = tmp / "out"
    run_cli("submit", "--one-file-per-task", "--executor", "local", "--workers", "2", "--no-progress", "--backend", "hf",
            "--input", write_corpus(tmp / "raw"), "--output", out, "--tokenizer", tokenizer, *extra)
    return out


def read_json(path: Path) -> dict:
    return orjson.loads(path.read_bytes())


def shard_doc_lengths(shard: Path) -> list[int]:
    """Every document length of a shard, in order, from a plain tar walk (no sidecar, no report code)."""
    import tarfile

    samples: dict[str, dict[str, np.ndarray]] = {}
    with tarfile.open(shard) as tf:
        for m in tf:
            key, kind, ext = m.name.split(".")
            data = tf.extractfile(m).read()  # type: ignore[union-attr]
            samples.setdefault(key, {})[kind] = np.frombuffer(data, dtype="<u2" if ext == "u16" else "<u4")
    lengths: list[int] = []
    for parts in samples.values():
        lengths.extend(parts["doclens"].tolist() if "doclens" in parts else [parts["tokens"].size])
    return lengths


def plan_records(out: Path) -> list[list[list]]:
    """Each task's work items as plan/tasks.jsonl stores them: ``[input, path, size, mtime_ns, format,
    compression, rows, start, end, first_line]`` with trailing defaults left out (docs/format.md)."""
    return [orjson.loads(line) for line in (out / "plan" / "tasks.jsonl").read_bytes().splitlines()]


def task_input_bytes(out: Path, task: int) -> int:
    total = 0
    for it in plan_records(out)[task]:
        full = it + [None, None, 0, None, 1][len(it) - 5:]       # the defaults left out
        size, start, end = full[2], full[7], full[8]
        total += (size if end is None else end) - start
    return total


def expected_numbers(out: Path) -> dict:
    """The report's numbers for a local output, computed from the files alone."""
    job = read_json(out / "job.json")
    sidecars = {}
    for t in range(job["summary"]["tasks"]):
        p = out / f"shard-{t:05d}.json"
        if p.exists():
            sidecars[t] = read_json(p)
    done = [sidecars[t] for t in sorted(sidecars)]
    lengths = [n for s in done for n in shard_doc_lengths(out / s["shard"])]
    skipped: dict[str, int] = {}
    for s in done:
        for k, v in s["skipped"].items():
            skipped[k] = skipped.get(k, 0) + v
    return {
        "job": job, "sidecars": done, "lengths": np.array(lengths, dtype=np.int64),
        "totals": {"shards": len(done), "skipped": sum(skipped.values()),
                   **{k: sum(s[k] for s in done) for k in ("samples", "documents", "tokens", "bytes")}},
        "skipped": skipped,
        "examples": [{"reason": e["reason"], "task": s["task"], "file": e["file"], "line": e["line"],
                      "byte": e.get("byte")} for s in done for e in s["skipped_examples"]][:20],
    }


def lookup(doc: dict, key: str):
    """``"tasks.per_task.3.elapsed_s"`` -> doc["tasks"]["per_task"][3]["elapsed_s"]."""
    cur = doc
    for part in key.split("."):
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    return cur
