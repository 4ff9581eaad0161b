"""One measurement per process, for bench/tokenize.py: ``python bench/tokenize_children.py KIND ARGS_JSON``.

Each prints one JSON line: ``tokens``, ``cpu_s`` and ``wall_s`` of the measured section only (corpus
loading and library imports excluded for the raw library numbers; everything from reading the plan to
the fsynced sidecar included for shardprep tasks), plus its own ``peak_rss_bytes``.

"Per core" in the report is tokens per CPU-second of the measured section (user + system, all threads
of the process): on a machine shared with other jobs, CPU time is what a core actually spent, while
wall time also counts waiting for the CPU.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import child_peak_rss, read_texts  # noqa: E402

BATCH_CHARS = 1 << 20  # the same batching the shardprep task uses by default


def _char_batches(texts: list[str], limit: int = BATCH_CHARS) -> list[list[str]]:
    batches, batch, size = [], [], 0
    for t in texts:
        batch.append(t)
        size += len(t)
        if size >= limit:
            batches.append(batch)
            batch, size = [], 0
    if batch:
        batches.append(batch)
    return batches


class _Clock:
    def __enter__(self) -> "_Clock":
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.cpu_s = time.process_time() - self.cpu0
        self.wall_s = time.perf_counter() - self.wall0


def raw_hf(corpus: str, tokenizer: str) -> dict:
    """tokenizers ``encode_batch_fast`` (threads from RAYON_NUM_THREADS), special strings as text."""
    from tokenizers import Tokenizer

    batches = _char_batches(read_texts(Path(corpus)))
    tok = Tokenizer.from_file(tokenizer)
    tok.encode_special_tokens = True
    tok.encode_batch_fast(["warm up"], add_special_tokens=False)
    tokens = 0
    with _Clock() as c:
        for b in batches:
            tokens += sum(map(len, tok.encode_batch_fast(b, add_special_tokens=False)))
    return {"tokens": tokens, "cpu_s": c.cpu_s, "wall_s": c.wall_s}


def raw_gigatoken(corpus: str, tokenizer: str, parallel: bool = False) -> dict:
    """gigatoken ``encode_batch`` on the calling thread (awkward imported before the clock starts)."""
    import awkward  # noqa: F401  - imported by gigatoken on first use; a one-off cost, not encode speed
    import gigatoken

    from shardprep.tokenizer.gigatoken_backend import plain_text_specials_json

    batches = _char_batches(read_texts(Path(corpus)))
    tok = gigatoken.Tokenizer.from_json(plain_text_specials_json(Path(tokenizer).read_text())).backend
    tok.encode_batch(["warm up"], parallel=parallel)
    tokens = 0
    with _Clock() as c:
        for b in batches:
            tokens += len(tok.encode_batch(b, parallel=parallel).layout.content)
    return {"tokens": tokens, "cpu_s": c.cpu_s, "wall_s": c.wall_s}


def task(output: str, threads: int = 1) -> dict:
    """One shardprep task, in process, from plan to sidecar (the plan was written by the parent)."""
    from shardprep.job.task import run_task

    with _Clock() as c:
        result = run_task(Path(output), 0, threads=threads)
    sc = result.sidecar
    itemsize = 2 if sc.dtype == "uint16" else 4
    return {"tokens": sc.tokens, "cpu_s": c.cpu_s, "wall_s": c.wall_s, "output_bytes": sc.bytes,
            "payload_bytes": sc.tokens * itemsize, "backend": sc.backend, "sidecar_stats": sc.stats}


def naive(corpus: str, tokenizer: str, output: str) -> dict:
    """The script people write first: per-document ``encode`` and JSON token lists in a webdataset tar."""
    import webdataset as wds
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    eos = tok.token_to_id("<|endoftext|>")
    tokens = 0
    with _Clock() as c:
        with wds.TarWriter(output) as sink, open(corpus, encoding="utf-8") as f:
            for i, line in enumerate(f):
                ids = tok.encode(json.loads(line)["text"]).ids + [eos]
                sink.write({"__key__": f"{i:09d}", "json": ids})
                tokens += len(ids)
    return {"tokens": tokens, "cpu_s": c.cpu_s, "wall_s": c.wall_s, "output_bytes": Path(output).stat().st_size,
            "payload_bytes": tokens * 2}


# -- inside one task with 2 CPUs: the backend's own threads or a process pool? -----------------------
def _pool_init(tokenizer_json: str, backend: str) -> None:
    global _POOL_BACKEND
    from shardprep.tokenizer.backend import BACKENDS

    _POOL_BACKEND = BACKENDS[backend](tokenizer_json, False)


def _pool_encode(batch: list[str]):
    cpu0 = time.process_time()
    flat, lengths = _POOL_BACKEND.encode_batch(batch)
    return flat, lengths, time.process_time() - cpu0


def encode_threads(corpus: str, tokenizer: str, backend: str) -> dict:
    """The shardprep backend with its own threads (RAYON_NUM_THREADS set by the parent)."""
    from shardprep.tokenizer.backend import BACKENDS

    batches = _char_batches(read_texts(Path(corpus)))
    import os

    threads = int(os.environ.get("RAYON_NUM_THREADS", "1"))
    if backend == "gigatoken":  # shardprep's task runs it single-threaded; this measures the alternative
        from shardprep.tokenizer.gigatoken_backend import GigatokenBackend

        enc = GigatokenBackend(Path(tokenizer).read_text(), threads=threads)
    else:  # tokenizers sizes its pool from RAYON_NUM_THREADS / TOKENIZERS_PARALLELISM
        enc = BACKENDS[backend](Path(tokenizer).read_text(), False)
    enc.encode_batch(["warm up: imports and lazy tables are start-up, not encode speed"])
    tokens = 0
    with _Clock() as c:
        for b in batches:
            tokens += int(enc.encode_batch(b)[0].size)
    return {"tokens": tokens, "cpu_s": c.cpu_s, "wall_s": c.wall_s}


def encode_pool(corpus: str, tokenizer: str, backend: str, workers: int) -> dict:
    """The same batches through ``workers`` spawned processes, one single-threaded backend each."""
    import multiprocessing as mp
    import os

    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    batches = _char_batches(read_texts(Path(corpus)))
    tok_json = Path(tokenizer).read_text()
    with mp.get_context("spawn").Pool(workers, _pool_init, (tok_json, backend)) as pool:
        pool.map(_pool_encode, [["warm up the workers"]] * workers)  # start-up is not encode speed
        tokens, worker_cpu = 0, 0.0
        with _Clock() as c:
            for flat, _lengths, cpu in pool.imap(_pool_encode, batches):  # ordered, like a shard needs
                tokens += int(flat.size)
                worker_cpu += cpu
    # CPU: this process (sending texts, receiving ids) plus the workers' encode calls
    return {"tokens": tokens, "cpu_s": c.cpu_s + worker_cpu, "wall_s": c.wall_s}


def local_run(output: str, workers: int) -> dict:
    """Every task of a plan through the local executor (spawned processes, 1 thread each), timed."""
    import resource

    from shardprep.executor.local import LocalExecutor, LocalOptions
    from shardprep.job.state import job_state

    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    todo = job_state(Path(output)).missing
    before = children_cpu()
    with _Clock() as c:
        LocalExecutor(LocalOptions(workers, show_progress=False), finalize=False).launch(Path(output), todo)
    sidecars = [json.loads(p.read_text()) for p in sorted(Path(output).glob("shard-*.json"))]
    # the pool's worker processes are reaped when the executor returns, so their CPU is counted here
    return {"tokens": sum(s["tokens"] for s in sidecars), "cpu_s": c.cpu_s, "wall_s": c.wall_s,
            "workers_cpu_s": children_cpu() - before, "task_threads": [s["stats"]["threads"] for s in sidecars],
            "tasks": len(sidecars), "task_elapsed_s": [s["stats"]["elapsed_s"] for s in sidecars],
            "task_peak_rss_bytes": max(s["stats"]["peak_rss_bytes"] for s in sidecars)}


KINDS = {f.__name__: f for f in (raw_hf, raw_gigatoken, task, naive, encode_threads, encode_pool, local_run)}

if __name__ == "__main__":
    out = KINDS[sys.argv[1]](**json.loads(sys.argv[2]))
    out["peak_rss_bytes"] = child_peak_rss()
    print(json.dumps(out))
