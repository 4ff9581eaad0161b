"""``shardprep export-hf``: write a Hugging Face dataset out as N balanced jsonl/txt files."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "export-hf"
HELP = "export a Hugging Face dataset (hub id, save_to_disk directory, or json/parquet/text files) to N files"
DESCRIPTION = """Write SOURCE out as --num-files files of balanced size in --output, ready for `stage`/`submit`.

SOURCE is a directory written by `save_to_disk` (memory-mapped), a builder name (json, parquet, text, csv,
arrow) together with --data-files, or a hub id (streamed; needs the network or a warm cache).  Each file
holds a contiguous range of rows, cut so every file gets the same number of text bytes, so the files in
name order keep the dataset's row order.  Empty texts are skipped and counted.  Files are written
atomically and listed in OUTPUT/export.json; re-running the same command skips finished files, and other
arguments into the same OUTPUT are refused.

examples:
  shardprep export-hf wikitext --config wikitext-103-raw-v1 --split train --num-files 64 --output /data/raw
  shardprep export-hf /path/to/saved_dataset --num-files 64 --output /data/raw
  shardprep export-hf parquet --data-files 'dl/*.parquet' --num-files 64 --output /data/raw"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardprep.cli.args import add_field
    from shardprep.hf.export import FORMATS
    from shardprep.hf.export import ExportRequest as Req

    p.add_argument("source", metavar="SOURCE",
                   help="save_to_disk directory, builder name (json/parquet/text/csv/arrow) or hub dataset id")
    add_field(p, "--config", owner=Req, help="hub dataset configuration (subset) name")
    add_field(p, "--split", owner=Req,
              help="split to export (default: train; for a saved DatasetDict, one of its splits)")
    add_field(p, "--data-files", owner=Req, action="append", default=[], metavar="GLOB",
              help="local files for a builder name (repeatable; globs expanded here, sorted), or file "
                   "patterns inside a hub repository")
    p.add_argument("--num-files", "-n", type=int, required=True, help="number of output files")
    p.add_argument("--output", "-o", required=True, metavar="DIR", help="output directory")
    add_field(p, "--format", owner=Req, choices=FORMATS,
              help='jsonl: one {"text": ...} object per line (keeps line breaks); txt: one document per '
                   "line (texts with line breaks are refused)")
    add_field(p, "--text-field", owner=Req, help="dataset column holding the text")
    add_field(p, "--id-field", owner=Req,
              help='dataset column to keep as "id" in each jsonl line (jsonl only)')
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


def run(args: argparse.Namespace) -> int:
    from shardprep._extras import require
    from shardprep.hf.export import ExportRequest, balance_ratio, export, summary_line

    datasets = require("datasets", feature="exporting a Hugging Face dataset")

    # The export reads Arrow batches only; without this, every streamed dataset imports torch (1-2 s) just to
    # share an epoch counter with DataLoader workers.  This process is ours, so the switch is safe here.
    datasets.config.TORCH_AVAILABLE = False
    if args.no_progress:
        datasets.disable_progress_bars()
    req = ExportRequest(source=args.source, output=Path(args.output), num_files=args.num_files,
                        config=args.config, split=args.split, data_files=tuple(args.data_files),
                        format=args.format, text_field=args.text_field, id_field=args.id_field)
    result = export(req, progress=not args.no_progress)
    print(summary_line(result))
    print(f"largest file / mean: {balance_ratio(result):.3f}")
    print(f"next: shardprep doctor --input {result.output} --tokenizer TOK --output SHARDS; "
          f"shardprep submit --input {result.output} --tokenizer TOK --output SHARDS")
    return 0
