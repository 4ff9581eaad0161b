"""``shardprep report``: a self-contained HTML page (plus PNGs) or JSON about a job, finished or running."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardprep.cli._s3 import add_s3_arguments, storage_from_args

NAME = "report"
HELP = "write an HTML page with figures (and PNGs) about a job's shards, tasks and tokenizer, or print --json"
DESCRIPTION = (
    "Document lengths, tokens per shard, task throughput and timeline, skipped documents, backends, the "
    "tokenizer and a few decoded documents, from OUTPUT's index.json, sidecars, shards and task logs. "
    "Works mid-job (progress and ETA so far). The page needs matplotlib (pip install 'shardprep[report]'); "
    "--json does not. Given a loader mixture spec (.json/.yaml) instead, the page is the mixture's table "
    "(`shardprep mix`). See docs/report.md."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardprep.report import DEFAULT_MAX_CHUNKS  # no numpy: `shardprep --help` stays cheap

    p.add_argument("output", metavar="OUTPUT",
                   help="the job's output directory, a finalized output the loader reads (s3://bucket/prefix, "
                        "gs://..., any URL), or a loader mixture spec (.json, .yaml)")
    p.add_argument("--html", default=None, metavar="PATH",
                   help="where to write the page (PNGs go beside it); default: OUTPUT/report.html, or ./report.html "
                        "for a remote OUTPUT")
    p.add_argument("--json", action="store_true", help="print the report's numbers as JSON instead of writing a page")
    p.add_argument("--max-chunks", type=int, default=DEFAULT_MAX_CHUNKS, metavar="N",
                   help="read document lengths from at most N chunks, spread evenly over the job (pack layout)")
    add_s3_arguments(p)


def run(args: argparse.Namespace) -> int:
    from shardprep.errors import ConfigError
    from shardprep.loader.mixture import is_spec_file
    from shardprep.report.build import report_numbers, write_report
    from shardprep.storage.locations import is_url

    if args.max_chunks < 1:
        raise ConfigError(f"--max-chunks={args.max_chunks} is invalid: must be >= 1")
    if is_spec_file(args.output):
        return _mixture(args)
    numbers = report_numbers(args.output, max_chunks=args.max_chunks, storage=storage_from_args(args))
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(numbers, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    default = Path("report.html") if is_url(args.output) else Path(args.output) / "report.html"
    written = write_report(numbers, Path(args.html) if args.html else default)
    print(f"report: {written.html}")
    if "chat" in numbers:
        from shardprep.report.fmt import chat_line

        print(f"  {chat_line(numbers['chat'])}")
    for png in written.pngs:
        print(f"  figure: {png}")
    return 0


def _mixture(args: argparse.Namespace) -> int:
    """A mixture spec's page (or --json): its sources' table and schedule, beside the spec by default."""
    import orjson

    from shardprep.report.mixture import mixture_numbers, render_mixture_page
    from shardprep.storage.atomic import atomic_writer

    numbers = mixture_numbers(args.output)
    if args.json:
        sys.stdout.write(orjson.dumps(numbers, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    spec = Path(args.output)
    html = Path(args.html) if args.html else spec.with_name(f"{spec.stem}-report.html")
    with atomic_writer(html) as f:
        f.write(render_mixture_page(numbers).encode("utf-8"))
    print(f"report: {html}")
    return 0
