"""``shardprep trace``: which documents made a step's batch, where they come from, and which steps read a document.

Offline and torch-free (a login node): the loader's order is a pure function of the data, the options, the
world and the run's history, rebuilt by ``loader.trace`` from the options given or a saved loader state.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

NAME = "trace"
HELP = "which documents (and input files, offsets, lines) made step N's batch; or which steps read a document"
DESCRIPTION = (
    "Rebuilds a training run's order offline (no torch) from the loader options it used, or from a saved loader "
    "state (the JSON of ShardLoader.state_dict(): it records the options, resumes and skips), and prints for each "
    "row of step N (global steps counted from 0) on each rank: its source, shard, document, token range, and the "
    "input file or URL, byte offset or row, and line it came from. --find-doc / --find-input go the other way: "
    "every step, rank and row that reads a document. See docs/loader.md, 'Tracing and skipping'."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shardprep.cli.args import count_arg
    from shardprep.cli.mix import token_count

    p.add_argument("spec", metavar="SPEC", nargs="+",
                   help="what the loader read: a finalized output (directory or URL), a mixture spec file, or "
                        "legacy tars, as ShardDataset takes it")
    p.add_argument("--step", type=count_arg(0), default=None, help="global step (counted from 0) to trace")
    p.add_argument("--rank", type=count_arg(0), default=None, help="only this rank (default: every rank)")
    p.add_argument("--world-size", dest="world", type=count_arg(1), default=None, help="ranks of the run")
    p.add_argument("--batch-size", dest="batch_size", type=count_arg(1), default=None,
                   help="units per batch per rank (pack/pad)")
    p.add_argument("--mode", choices=("pack", "pad", "doc"), default=None, help="the loader's mode (default pack)")
    p.add_argument("--seq-len", type=count_arg(1), default=None, help="tokens per row (pack, pad)")
    p.add_argument("--seed", type=count_arg(0), default=None, help="the loader's seed (default 0)")
    p.add_argument("--no-shuffle", dest="shuffle", action="store_false", default=None, help="the run did not shuffle")
    p.add_argument("--shuffle-block", type=count_arg(1), default=None, help="the run's shuffle_block (units)")
    p.add_argument("--total-tokens", type=token_count, default=None, help="the run's total_tokens (a budget)")
    p.add_argument("--pack-window", type=count_arg(1), default=None,
                   help="chat data in pack mode: the run's pack_window (default 1024)")
    p.add_argument("--overflow", choices=("truncate", "drop"), default=None,
                   help="chat data in pack mode: the run's overflow (default truncate)")
    p.add_argument("--state", default=None, metavar="STATE.json",
                   help="a saved loader state: options, resumes and skips from it (given options must agree)")
    p.add_argument("--quarantine", default=None, metavar="FILE", help="apply a quarantine file as the loader does")
    p.add_argument("--text", action="store_true", help="print each document's text from its input")
    p.add_argument("--json", action="store_true", help="one JSON document")
    find = p.add_argument_group("the inverse: which steps read a document")
    find.add_argument("--find-doc", default=None, metavar="ID", help="a global document id (mixture: SOURCE:ID)")
    find.add_argument("--find-input", default=None, metavar="PATH_OR_URL", help="an input, with --offset or --row")
    find.add_argument("--offset", type=count_arg(0), default=None, help="byte offset in the (decompressed) input")
    find.add_argument("--row", type=count_arg(0), default=None, help="row of a parquet/Arrow input")
    find.add_argument("--epochs", type=count_arg(1), default=1, help="loader epochs to search")
    find.add_argument("--steps", type=count_arg(0), default=None, metavar="N", help="search up to global step N instead")


def _options(args: argparse.Namespace) -> Any:
    from shardprep.loader.trace import RunOptions

    return RunOptions(mode=args.mode, seq_len=args.seq_len, seed=args.seed, shuffle=args.shuffle,
                      shuffle_block=args.shuffle_block, total_tokens=args.total_tokens, world=args.world,
                      batch=args.batch_size, pack_window=args.pack_window, overflow=args.overflow)


def _check(args: argparse.Namespace) -> None:
    from shardprep.errors import ConfigError

    finding = args.find_doc is not None or args.find_input is not None
    if finding == (args.step is not None):
        raise ConfigError("give --step N (what a step read) or --find-doc / --find-input (which steps read it)")
    if args.find_input is not None and (args.offset is None) == (args.row is None):
        raise ConfigError("--find-input needs --offset B (a byte offset) or --row R (a parquet/Arrow row)")
    if args.find_doc is not None and args.find_input is not None:
        raise ConfigError("--find-doc and --find-input both given: one document at a time")


def run(args: argparse.Namespace) -> int:
    from shardprep.loader.docorigin import Provenance
    from shardprep.loader.trace import open_run, read_state

    _check(args)
    quarantine = None
    if args.quarantine is not None:
        from shardprep.loader.quarantine import load_quarantine
        quarantine = load_quarantine(args.quarantine)
    state = read_state(args.state) if args.state is not None else None
    spec: object = args.spec[0] if len(args.spec) == 1 else list(args.spec)
    traced = open_run(spec, _options(args), state=state, quarantine=quarantine)
    prov = Provenance(traced.reading)
    try:
        if args.step is None:
            out = _find(args, traced, prov)
            return _emit(args, out, _find_lines(out))
        ranks = [args.rank] if args.rank is not None else list(range(traced.world))
        out = {"step": args.step, "world": traced.world, "mode": traced.reading.layout.name,
               "ranks": [_rank(traced, prov, args.step, r, text=args.text) for r in ranks]}
        return _emit(args, out, _step_lines(out))
    finally:
        traced.close()


def _rank(traced: Any, prov: Any, step: int, rank: int, *, text: bool) -> dict:
    epoch, ranges, rows = traced.batch(step, rank)
    described = []
    for row in rows:
        described.append([prov.describe(span) for span in row])
        if text:        # the documents' text from their inputs, read as their tasks read them
            for span, item in zip(row, described[-1]):
                item["text"], item["text_note"] = prov.text(span)
    return {"rank": rank, "epoch": epoch, "positions": [list(r) for r in ranges], "rows": described}


def _emit(args: argparse.Namespace, out: dict, lines: list[str]) -> int:
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print("\n".join(lines))
    return 0


def _where(item: dict) -> str:
    if item.get("input") is None:
        inputs = "; ".join(f"{i['path']} [{i['start']}, {'end' if i['end'] is None else i['end']}) {i['unit']}"
                           for i in item.get("task_inputs", []))
        return f"{item['note']}" + (f"; the task read: {inputs}" if inputs else "")
    place = f"{item['kind']} {item['offset']}" + (f" line {item['line']}" if item.get("line") is not None else "")
    return f"{item['input']} {place}"


def _step_lines(out: dict) -> list[str]:
    lines = []
    for r in out["ranks"]:
        n = len(r["rows"])
        lines.append(f"step {out['step']} rank {r['rank']}: epoch {r['epoch']}, {n} row{'s' * (n != 1)}"
                     + ("" if n else " (this rank has no batch at this step)"))
        for i, row in enumerate(r["rows"]):
            for item in row:
                lo, hi = item["tokens"]
                lines.append(f"  row {i}: {item['source']} {item['shard']} doc {item['doc']} (id {item['doc_id']}) "
                             f"tokens [{lo}, {hi}): {_where(item)}")
                if "text" in item:
                    lines.append(f"    text ({item['text_note']}): {item['text']!r}")
    return lines


def _find(args: argparse.Namespace, traced: Any, prov: Any) -> dict:
    from shardprep.loader.trace import doc_ref

    if args.find_doc is not None:
        ref = doc_ref(traced.reading, args.find_doc)
    else:
        ref = _input_document(traced, prov, args.find_input, args.offset if args.row is None else args.row,
                              rows=args.row is not None)
    reads = traced.find(ref, epochs=args.epochs, last_step=args.steps)
    from shardprep.loader.rowdocs import DocSpan

    doc = prov.describe(DocSpan(ref.source, ref.shard, ref.doc,
                                int(traced.reading.sources[ref.source].shard_doc_start[ref.shard]) + ref.doc, 0, 0))
    doc.pop("tokens")
    return {"document": doc, "reads": reads}


def _input_document(traced: Any, prov: Any, location: str, where: int, *, rows: bool) -> Any:
    """The document whose record holds byte ``where`` (the last starting at or before it), or starts at row ``where``."""
    from shardprep.errors import ConfigError
    from shardprep.loader.docorigin import documents_of_input

    what = f"--find-input {location} --{'row' if rows else 'offset'} {where}"
    found = documents_of_input(traced.reading, prov, location, where if rows else 0, where + 1, rows=rows, where=what)
    if not found:
        raise ConfigError(f"{what}: no document of the data starts there")
    return max(found, key=lambda d: prov.origin(d.source, d.shard, d.doc).offset)


def _find_lines(out: dict) -> list[str]:
    d = out["document"]
    lines = [f"{d['source']} {d['shard']} doc {d['doc']} (id {d['doc_id']}): {_where(d)}"]
    for r in out["reads"]:
        if r["step"] is not None:
            lines.append(f"  epoch {r['epoch']}: step {r['step']} rank {r['rank']} row {r['row']} "
                         f"(position {r['position']})")
        elif r["position"] is None:
            lines.append(f"  epoch {r['epoch']}: not read: {r['why']}")
        else:
            lines.append(f"  epoch {r['epoch']}: not read: {r['why']} in epoch {r['epoch']} (position {r['position']})")
    return lines
