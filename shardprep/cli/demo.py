"""``shardprep demo``: the whole job end to end on the embedded default.

Generates a sample corpus (txt, jsonl, jsonl.gz), trains a small byte-level BPE tokenizer offline unless
one is given, tokenizes with the local executor, finalizes, verifies, prints a summary and ends by writing
the report page (``shardprep report``) and printing its path.  Needs no data
and no network, so it is the first command to run on a new machine.  It needs only the core and the
``[report]`` extra, which is all ``make demo`` installs (no torch): tests/test_r4_demo_deps.py runs it with
the other extras' packages blocked.

The demo shows the parallel job shardprep is about: one task (and shard) per generated file, run by a
pool of workers, and samples of ``DEMO_CHUNK_TOKENS`` tokens, so the shards, the inspect output and the
report have several of each.  The default sizing would make one task of the whole half MiB (it keeps
shards above 16 MiB), which shows nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from shardprep.cli.args import count_arg
from shardprep.errors import IncompleteError

DEMO_CHUNK_TOKENS = 16384   # tokens per sample: several samples per demo shard

NAME = "demo"
HELP = "run the whole job end to end on a generated sample corpus (no data or network needed)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", default="demo-out", help="where the corpus, tokenizer and shards go")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer to use instead of training a small byte-level BPE offline")
    p.add_argument("--files", type=count_arg(1), default=6, help="sample corpus files to generate")
    p.add_argument("--docs-per-file", type=count_arg(1), default=2000, help="documents per generated file")
    p.add_argument("--workers", type=count_arg(1), default=None, help="parallel task processes (default: usable CPUs)")


def run(args: argparse.Namespace) -> int:
    from shardprep.api import tokenize_directory
    from shardprep.cli import inspect as inspect_cmd
    from shardprep.demo_data import build_sample_tokenizer, write_sample_corpus
    from shardprep.job.verify import verify

    work = Path(args.workdir)
    raw = work / "raw"
    if not raw.exists():  # keep an existing corpus: rewriting it would change mtimes and the plan
        write_sample_corpus(raw, files=args.files, docs_per_file=args.docs_per_file)
    tokenizer = args.tokenizer or str(work / "tokenizer.json")
    if not args.tokenizer and not Path(tokenizer).exists():
        build_sample_tokenizer(tokenizer)
    shards = work / "shards"
    # overwrite: the demo's own output directory, replanned only when the plan differs (an older demo's)
    tokenize_directory(raw, shards, tokenizer, workers=args.workers, show_progress=True, overwrite=True,
                       one_file_per_task=True, chunk_tokens=DEMO_CHUNK_TOKENS)
    bad = verify(shards)
    if bad:
        raise IncompleteError(f"verification failed: {', '.join(b.name for b in bad)}")
    from shardprep.shard.index import read_index

    t = read_index(shards).totals
    print(f"demo: {t.shards} task(s), one per input file (--one-file-per-task), each writing one shard in "
          f"{shards}: {t.documents:,} documents, {t.tokens:,} tokens in {t.samples:,} samples (a sample: whole "
          f"documents up to --chunk-tokens {DEMO_CHUNK_TOKENS:,}), {t.bytes:,} bytes; verified")
    print(f"next: shardprep status {shards}; shardprep inspect {shards}/shard-00000.tar --decode 2")
    inspect_cmd.run(argparse.Namespace(shard=str(shards / "shard-00000.tar"), decode=1, tokenizer=None, max_chars=200))
    _write_report(shards)
    return 0


def _write_report(shards: Path) -> None:
    """The last step: the report page (figures need the ``[report]`` extra, which ``make demo`` installs)."""
    from shardprep._extras import MissingExtra
    from shardprep.report.build import report_numbers, write_report

    try:
        written = write_report(report_numbers(shards), shards / "report.html")
    except MissingExtra as e:
        print(f"report: not written: {e}")
        return
    print(f"report: {written.html} (open it in a browser; figures as PNG beside it)")
