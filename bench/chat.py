"""Issue 28 item 5: chat encoding per core, shardprep end to end against the usual route, side by side.

    python bench/chat.py [--work DIR] [--conversations 4000] [--repeats 2] [--core N] [--quick]

On the same conversations (generated from the shared English corpus: multi-turn, a system prompt in most,
turns from a sentence to a few thousand tokens; written once as jsonl), for two template/tokenizer pairs:

* byte-level BPE: TRL's ``qwen3_training.jinja`` with GPT-2's tokenizer (shardprep's ``auto`` takes
  gigatoken's ids, checked against ``tokenizers``);
* SentencePiece: TRL's ``phi3_training.jinja`` with Phi-3's tokenizer (``auto`` stays ``hf``);

each measured as a whole process pinned to one core (``taskset``), from its start to its exit, CPU time
included (the process's and its children's, from ``getrusage``):

(a) the usual route: ``datasets.Dataset.from_json`` then ``.map(batched=True)`` calling
    ``tokenizer.apply_chat_template(..., tokenize=True, return_dict=True, return_assistant_tokens_mask=True)``
    (``AutoTokenizer`` from a directory holding the tokenizer and the template), one process, a fresh
    datasets cache (as a first run finds it);
(b) ``shardprep submit --chat --chat-template FILE --executor local --workers 1`` on the same file and
    directory (plan, the task, finalize).

Both must agree on the total tokens, the trained (assistant) tokens and the ids themselves (a digest of
every id in order).  Reported: conversations/s, tokens per CPU second and the ratio (goal: >= 3x), and the
shard bytes of the trained ranges members against the whole shard (goal: <= 2%).  The routes alternate
``--repeats`` times; each one's fastest run is reported (the machine is shared and noisy).  Markdown to
stdout and ``bench/results/chat.md``, the raw numbers beside it as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, _english_sentences, machine_info, markdown_table, write_report  # noqa: E402

CHAT = SHARED / "chat" / "trl-generation-markers"
PAIRS = {   # name: (tokenizer folder, template, tokenizer_config extras)
    "byte-level BPE (gpt2 + qwen3_training)": ("gpt2", "qwen3_training.jinja", {}),
    "SentencePiece (phi3 + phi3_training)": ("bpe-spm-bytefallback-phi3-mini", "phi3_training.jinja",
                                             {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
}
SYSTEM_PROMPTS = ("You are a helpful assistant.", "You are a careful historian. Cite what you know.",
                  "Answer briefly and precisely.", "You are a literature tutor; explain the text to a student.",
                  "You summarise articles for busy readers.")
ASKS = ("Can you tell me more about this?", "Summarise the following.", "What happened next?",
        "Explain this passage:", "Why does it matter?", "Rewrite this in plain words:")


# -- the conversations ----------------------------------------------------------------------------------
def _conversation(rng: random.Random, pool: list[str]) -> list[dict]:
    """A system prompt in 70%, 1-6 exchanges; user turns of a question and 0-6 sentences, assistant turns of
    1 to ~100 consecutive sentences (log-uniform: most short, some of a couple of thousand tokens)."""
    messages = []
    if rng.random() < 0.7:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    for _ in range(rng.choice((1, 1, 2, 2, 3, 4, 6))):
        start = rng.randrange(len(pool))
        context = " ".join(pool[(start + i) % len(pool)] for i in range(rng.randint(0, 6)))
        messages.append({"role": "user", "content": f"{rng.choice(ASKS)} {context}".strip()})
        n = max(1, int(round(2 ** rng.uniform(0, 6.7))))
        start = rng.randrange(len(pool))
        messages.append({"role": "assistant", "content": " ".join(pool[(start + i) % len(pool)] for i in range(n))})
    return messages


def write_conversations(path: Path, n: int, seed: int = 28) -> dict:
    """``n`` conversations as jsonl (``{"messages": [...]}``), the same for a given seed."""
    rng, pool = random.Random(seed), _english_sentences()
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            f.write(json.dumps({"messages": _conversation(rng, pool)}, ensure_ascii=False) + "\n")
    return {"conversations": n, "file_bytes": path.stat().st_size}


def tokenizer_dir(work: Path, pair: str) -> Path:
    """A directory as ``from_pretrained`` expects it: the shared tokenizer.json (linked) and a
    tokenizer_config.json naming the template and the special tokens."""
    tok, template, extras = PAIRS[pair]
    directory = work / tok
    directory.mkdir(parents=True, exist_ok=True)
    config = {"chat_template": (CHAT / template).read_text(encoding="utf-8"),
              "tokenizer_class": "PreTrainedTokenizerFast", **extras}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    if not (directory / "tokenizer.json").exists():
        os.symlink(SHARED / "tokenizers" / tok / "tokenizer.json", directory / "tokenizer.json")
    return directory


# -- (a) the usual route, in a child of its own ----------------------------------------------------------
def usual_route(tokenizer: str, data: str) -> dict:
    """(child) transformers' apply_chat_template with assistant masks over datasets.map, batched."""
    import datasets  # type: ignore[import-untyped]  # no stubs; a benchmark dependency only
    from transformers import AutoTokenizer

    datasets.disable_progress_bars()
    tok = AutoTokenizer.from_pretrained(tokenizer)

    def encode(batch: dict) -> dict:
        out: Any = tok.apply_chat_template(batch["messages"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        return {"input_ids": out["input_ids"], "assistant_masks": out["assistant_masks"]}

    ds = datasets.Dataset.from_json(data)
    ds = ds.map(encode, batched=True, remove_columns=ds.column_names)
    done = time.process_time()
    digest, tokens, trained = hashlib.blake2b(digest_size=16), 0, 0
    for ids, mask in zip(ds["input_ids"], ds["assistant_masks"]):       # the check, not the route: its CPU
        digest.update(len(ids).to_bytes(4, "little"))                    # is taken off the route's
        digest.update(b"".join(i.to_bytes(4, "little") for i in ids))
        tokens, trained = tokens + len(ids), trained + sum(mask)
    return {"conversations": len(ds), "tokens": tokens, "trained_tokens": trained, "ids_digest": digest.hexdigest(),
            "check_cpu_s": round(time.process_time() - done, 3)}


# -- measuring ------------------------------------------------------------------------------------------
def _pinned(cmd: list[str], core: int | None) -> list[str]:
    return ["taskset", "-c", str(core), *cmd] if core is not None and shutil.which("taskset") else cmd


def measured(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and its children, stdout) of ``cmd`` from start to exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def run_usual(tok: Path, data: Path, core: int | None, work: Path) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="hfcache-", dir=work))       # a fresh cache: as a first run finds it
    env = {"PYTHONPATH": str(REPO), "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    try:
        wall, cpu, out = measured(_pinned([sys.executable, __file__, "--child", str(tok), str(data)], core), env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "wall_s": round(wall, 3), "cpu_s": round(cpu - result["check_cpu_s"], 3)}


def run_shardprep(tok: Path, template: Path, data: Path, core: int | None, out: Path, backend: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "shardprep", "submit", "-i", str(data), "-o", str(out), "-t", str(tok), "--chat",
           "--chat-template", str(template), "--executor", "local", "--workers", "1", "--no-progress",
           "--backend", backend]
    wall, cpu, _ = measured(_pinned(cmd, core), {"PYTHONPATH": str(REPO)})
    return {**shard_facts(out), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def shard_facts(out: Path) -> dict:
    """What the sidecars say (documents, tokens, trained tokens, backends, the trained members' bytes
    against the shards') and a digest of every id in order, read back through the shard reader."""
    sys.path.insert(0, str(REPO))
    from shardprep.shard.index import read_index
    from shardprep.shard.reader import iter_shard_documents
    from shardprep.shard.sidecar import Sidecar

    facts = {"conversations": 0, "tokens": 0, "trained_tokens": 0, "shard_bytes": 0, "trained_member_bytes": 0}
    backends, digest = set(), hashlib.blake2b(digest_size=16)
    for entry in read_index(out).shards:
        sidecar = Sidecar.parse((out / entry.sidecar).read_bytes(), out / entry.sidecar)
        raw = json.loads((out / entry.sidecar).read_text())
        chunks = raw["chunks"]
        facts["trained_member_bytes"] += sum(size * (docs + 2 * ranges) for size, docs, ranges in zip(
            chunks["trained_itemsize"], chunks["docs"], chunks["trained_ranges"]))
        facts["shard_bytes"] += raw["bytes"]
        facts["conversations"] += raw["documents"]
        facts["tokens"] += raw["tokens"]
        facts["trained_tokens"] += raw["trained_tokens"]
        backends.add(_backend_label(raw["backend"]))
        for doc in iter_shard_documents(out / entry.name, sidecar):
            digest.update(len(doc).to_bytes(4, "little"))
            digest.update(doc.astype("<u4").tobytes())
    return {**facts, "backend": ", ".join(sorted(backends)), "ids_digest": digest.hexdigest()}


def _backend_label(record: dict) -> str:
    """``gigatoken``, ``hf``, or ``hf`` with why ``auto`` did not take the fast candidate."""
    why = record.get("fallback_reason")
    if not why:
        return record["name"]
    return f"{record['name']} (auto: {'not byte-level BPE' if 'byte-level' in why else 'ids differed'})"


# -- the run --------------------------------------------------------------------------------------------
def best(runs: list[dict]) -> dict:
    """The run with the least CPU (the least disturbed on a shared machine), with every run's CPU beside it."""
    return {**min(runs, key=lambda r: r["cpu_s"]), "cpu_s_runs": [r["cpu_s"] for r in runs]}


def measure_pair(pair: str, data: Path, work: Path, core: int | None, repeats: int, hf_too: bool) -> dict:
    """The routes of one pair, alternating ``repeats`` times; each route's fastest run."""
    tok = tokenizer_dir(work, pair)
    template = CHAT / PAIRS[pair][1]
    routes: dict[str, list[dict]] = {"usual": [], "shardprep": []}
    if hf_too:
        routes["shardprep --backend hf"] = []
    for _ in range(repeats):
        routes["usual"].append(run_usual(tok, data, core, work))
        routes["shardprep"].append(run_shardprep(tok, template, data, core, work / "out-auto", "auto"))
        if hf_too:
            routes["shardprep --backend hf"].append(run_shardprep(tok, template, data, core, work / "out-hf", "hf"))
    result = {name: best(runs) for name, runs in routes.items()}
    usual = result["usual"]
    for r in result.values():
        r["same_as_usual"] = all(r[k] == usual[k] for k in ("conversations", "tokens", "trained_tokens", "ids_digest"))
        r["tokens_per_cpu_s"] = round(r["tokens"] / r["cpu_s"], 1)
        r["conversations_per_cpu_s"] = round(r["conversations"] / r["cpu_s"], 1)
        r["ratio_vs_usual"] = round(usual["cpu_s"] / r["cpu_s"], 2)
    return result


def report(results: dict, meta: dict, command: str) -> str:
    rows, goals = [], []
    for pair, routes in results["pairs"].items():
        for name, r in routes.items():
            rows.append([pair, name, r.get("backend", "transformers"), r["conversations"], r["tokens"],
                         r["trained_tokens"], r["wall_s"], r["cpu_s"], r["conversations_per_cpu_s"],
                         r["tokens_per_cpu_s"], f"{r['ratio_vs_usual']:.2f}x", "yes" if r["same_as_usual"] else "NO"])
        ours = routes["shardprep"]
        share = ours["trained_member_bytes"] / ours["shard_bytes"]
        goals.append(f"- {pair}: shardprep ({ours['backend']}) {ours['ratio_vs_usual']:.2f}x the usual route's tokens "
                     f"per CPU second (goal >= 3x: {'met' if ours['ratio_vs_usual'] >= 3 else 'NOT met'}); trained "
                     f"ranges members {ours['trained_member_bytes']:,} of {ours['shard_bytes']:,} shard bytes = "
                     f"{share:.2%} (goal <= 2%: {'met' if share <= 0.02 else 'NOT met'})")
    m = meta["machine"]
    head = ["pair", "route", "ids from", "conversations", "tokens", "trained", "wall s", "CPU s", "conv / CPU s",
            "tokens / CPU s", "vs usual (CPU)", "same ids"]
    return "\n".join([
        "# Chat encoding per core: shardprep end to end against the usual route (issue 28)", "",
        f"`{command}`", "",
        f"{meta['data']['conversations']:,} conversations ({meta['data']['file_bytes'] / (1 << 20):.1f} MiB jsonl); "
        f"every process pinned to core {meta['core']} (taskset), timed from its start to its exit; CPU = user + "
        f"system of the process and its children; each route's least-CPU run of {meta['repeats']} (all: "
        "the JSON's cpu_s_runs).", "",
        f"Machine: {m['cpu_model']}, {m['cpus']} CPUs, shared with other jobs: load average "
        f"{m['load_avg_at_start']} at start, {meta['load_avg_at_end']} at end; Python {m['python']}, "
        f"transformers {m['versions']['transformers']}, tokenizers {m['versions']['tokenizers']}, gigatoken "
        f"{m['versions']['gigatoken']}, datasets {meta['datasets']}.", "",
        markdown_table(head, rows), "", *goals, ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "shardprep-bench-chat")
    ap.add_argument("--conversations", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    ap.add_argument("--quick", action="store_true", help="400 conversations, one run each")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "chat.md")
    args = ap.parse_args()
    if args.quick:
        args.conversations, args.repeats = 400, 1
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / f"conversations-{args.conversations}.jsonl"
    meta = {"data": write_conversations(data, args.conversations), "core": core, "repeats": args.repeats,
            "machine": machine_info(), "datasets": _datasets_version()}
    pairs = {pair: measure_pair(pair, data, args.work, core, args.repeats, hf_too=True)
             for pair in PAIRS}
    meta["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results = {"meta": meta, "pairs": pairs}
    command = "python bench/chat.py " + " ".join(sys.argv[1:])
    write_report(args.out, report(results, meta, command.strip()), results)


def _datasets_version() -> str:
    from importlib.metadata import version

    return version("datasets")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(usual_route(sys.argv[2], sys.argv[3])))
    else:
        main()
