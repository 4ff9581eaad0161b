"""Options shared by ``plan`` and ``submit``, and their conversion to option objects (one place)."""

from __future__ import annotations

import argparse

from shardprep.job.options import BACKENDS, TXT_MODES, PlanOptions, TokenizeOptions, parse_size
from shardprep.errors import ConfigError
from shardprep.storage.lustre import add_stripe_arguments, prepare_output_dir, stripe_layout_from_args
from shardprep.shard.format import DEFAULT_CHUNK_TOKENS, LAYOUTS


def size_arg(text: str) -> int:
    """argparse ``type=`` for byte sizes: a bad value becomes a usage error (exit 2) naming the value."""
    try:
        return parse_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_plan_arguments(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    g = p.add_argument_group("inputs and outputs")
    g.add_argument("--input", "-i", action="append", required=False, metavar="PATH",
                   help="input file, directory (walked recursively), glob, or @FILE listing paths; repeatable. "
                        "Types: .txt, .jsonl, .parquet, .arrow, or a save_to_disk directory; txt/jsonl may be .gz or .zst")
    g.add_argument("--output", "-o", required=required, metavar="DIR", help="output directory for shards and job.json")
    g.add_argument("--tokenizer", "-t", metavar="SPEC",
                   help="tokenizer.json file, directory with tokenizer files, or Hugging Face hub id (fast tokenizers only)")
    g.add_argument("--overwrite", action="store_true",
                   help="if OUTPUT holds a different plan, delete its shards and start over (default: refuse)")

    add_stripe_arguments(p)

    g = p.add_argument_group("documents")
    g.add_argument("--text-field", default="text", help="jsonl key / parquet or arrow column holding the text")
    g.add_argument("--txt-mode", choices=TXT_MODES, default="line",
                   help="txt inputs: one document per line, or blank-line separated paragraphs")
    g.add_argument("--strict", action="store_true",
                   help="fail on the first bad document (invalid UTF-8, empty, malformed JSON, missing field, "
                        "too long) instead of counting and skipping it")
    g.add_argument("--max-doc-bytes", default="16M", type=size_arg,
                   help="documents longer than this are skipped as too_long (suffixes K, M, G)")

    g = p.add_argument_group("tokens")
    g.add_argument("--eos", dest="add_eos", action=argparse.BooleanOptionalAction, default=True,
                   help="append the EOS token to every document")
    g.add_argument("--bos", dest="add_bos", action=argparse.BooleanOptionalAction, default=False,
                   help="prepend the BOS token to every document")
    g.add_argument("--eos-token", default=None, help="EOS token string (default: the tokenizer's own)")
    g.add_argument("--bos-token", default=None, help="BOS token string (default: the tokenizer's own)")
    g.add_argument("--allow-special-tokens", action="store_true",
                   help="let special-token strings in raw text (e.g. <|endoftext|>) become control tokens; "
                        "by default they are encoded as plain text")
    g.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="tokenizer backend; auto uses a faster one only after it reproduced the hf ids exactly")

    g = p.add_argument_group("shards and tasks")
    g.add_argument("--layout", choices=LAYOUTS, default="pack",
                   help="pack: samples of many documents (pretraining, ~1.02x raw token bytes); "
                        "doc: one sample per document (fine-tuning)")
    g.add_argument("--chunk-tokens", type=int, default=DEFAULT_CHUNK_TOKENS,
                   help="pack layout: tokens per sample (documents are never split)")
    g.add_argument("--target-task-bytes", type=size_arg, default=None,
                   help="balance tasks by input bytes: pack small files together and split large uncompressed "
                        "txt/jsonl (and parquet/arrow) files; default: one input file per task")


def tokenize_options_from_args(args: argparse.Namespace) -> TokenizeOptions:
    return TokenizeOptions(
        text_field=args.text_field, txt_mode=args.txt_mode, add_eos=args.add_eos, add_bos=args.add_bos,
        eos_token=args.eos_token, bos_token=args.bos_token, allow_special_tokens=args.allow_special_tokens,
        strict=args.strict, max_doc_bytes=args.max_doc_bytes, layout=args.layout, chunk_tokens=args.chunk_tokens,
        backend=args.backend,
    )


def plan_options_from_args(args: argparse.Namespace) -> PlanOptions:
    return PlanOptions(target_task_bytes=args.target_task_bytes)


def plan_from_args(args: argparse.Namespace):
    """Plan and freeze the job described by the command line; returns (plan, job)."""
    from shardprep.api import plan_job

    if not args.input:
        raise ConfigError("--input is required (a file, directory, glob or @list)")
    if not args.tokenizer:
        raise ConfigError("--tokenizer is required (tokenizer.json, a directory, or a hub id)")
    layout = stripe_layout_from_args(args)
    return plan_job(args.input, args.output, args.tokenizer, tokenize_options_from_args(args),
                    plan_options_from_args(args), overwrite=args.overwrite,
                    prepare_dir=lambda out: prepare_output_dir(out, layout))
