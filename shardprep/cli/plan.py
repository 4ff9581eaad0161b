"""``shardprep plan``: freeze the plan (job.json) without running anything; and the plan's arguments
(inputs, output, tokenizer, every ``TokenizeOptions``/``PlanOptions`` field, Lustre striping), which
``submit`` takes as well (and ``stage`` the striping)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from shardprep.cli._s3 import add_s3_arguments, storage_from_args
from shardprep.cli.args import add_field, count_arg, from_fields, size_arg, size_text
from shardprep.errors import ConfigError
from shardprep.job.options import BACKENDS, TRAIN_ON, TXT_MODES, ChatOptions, PlanOptions, TokenizeOptions
from shardprep.shard.format import LAYOUTS
from shardprep.storage.lustre import DEFAULT_SHARD_LAYOUT, StripeLayout, prepare_output_dir
from shardprep.units import human_bytes

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.chat.template import ChatTemplate
    from shardprep.job.plan import Plan
    from shardprep.job.schema import Job

NAME = "plan"
HELP = "list inputs, assign them to tasks and write OUTPUT/job.json (runs nothing)"

# An explicit --target-task-bytes under this is almost always a forgotten unit (`8` meant as 8M): it plans
# one task and one tiny shard per few bytes of input, thousands of them.  Refused unless forced.
SMALL_TASK_FLOOR = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_plan_arguments(p)
    add_small_tasks_argument(p)
    add_s3_arguments(p)


def add_small_tasks_argument(p: argparse.ArgumentParser) -> None:
    """``--force-small-tasks`` (plan and submit): accept a ``--target-task-bytes`` under the floor."""
    p.add_argument("--force-small-tasks", action="store_true",
                   help=f"accept a --target-task-bytes under {human_bytes(SMALL_TASK_FLOOR)} (refused by default: "
                        "it makes one task and one tiny shard per that many input bytes)")


def check_plan_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot check alone: a tiny explicit task size is a forgotten unit unless forced."""
    target = getattr(args, "target_task_bytes", None)
    if target is not None and target < SMALL_TASK_FLOOR and not getattr(args, "force_small_tasks", False):
        raise ConfigError(f"--target-task-bytes {target:,} means {target:,} bytes of input per task, under the "
                          f"{human_bytes(SMALL_TASK_FLOOR)} floor: it would plan a task and a shard per "
                          f"{human_bytes(target)} of input",
                          hint="give a unit (suffixes K, M, G: e.g. --target-task-bytes 256M), or add "
                               "--force-small-tasks if you really want tasks this small")


def run(args: argparse.Namespace) -> int:
    check_plan_arguments(args)
    # imported here: stage takes its striping arguments from this module, and its start-up stays without them
    from shardprep.job.plan_files import TaskTable
    from shardprep.job.state import describe_task_ids, job_state

    plan, job = plan_from_args(args)
    state = job_state(args.output, job)
    s = job.summary
    print(f"plan {job.fingerprint[:12]}: {s.inputs} input(s), {s.input_bytes:,} bytes -> {s.tasks} task(s)")
    print(sizing_line(job))
    print(f"tokenizer {job.tokenizer.source} ({job.tokenizer.vocab_size} ids, {job.tokenizer.dtype})")
    added = {"eos": plan.options.add_eos, "bos": plan.options.add_bos}
    for kind, line in plan.tokenizer.describe_specials().items():
        use = "" if kind not in added else " [added to every document]" if added[kind] else " [not added]"
        print(f"  {line}{use}")
    with TaskTable(Path(args.output), job) as table:
        for t in range(min(20, s.tasks)):
            items = table.task(t).items
            desc = ", ".join(i.input.path + ("" if i.work.start == 0 and i.work.end is None else
                                             f"[{i.work.start}:{i.work.end}]") for i in items[:3])
            more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
            print(f"  task {t}: {desc}{more}")
    if s.tasks > 20:
        print(f"  ... {s.tasks - 20} more task(s)")
    print(f"to run: {describe_task_ids(state.missing) if state.missing else 'nothing (all done)'}")
    return 0


def sizing_line(job: Job) -> str:
    """The task shape the plan used and why."""
    from shardprep.job.sizing import describe

    return describe(job.sizing, job.n_tasks)


# ------------------------------------------------------------------------------------- the plan's arguments

def add_plan_arguments(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Inputs, output, tokenizer, striping and every ``TokenizeOptions``/``PlanOptions`` field."""
    g = p.add_argument_group("inputs and outputs")
    g.add_argument("--input", "-i", action="append", required=False, metavar="PATH",
                   help="input file, directory (walked recursively), glob, or @FILE listing paths; repeatable. "
                        "Types: .txt, .jsonl, .parquet, .arrow, or a save_to_disk directory; txt/jsonl may be "
                        ".gz or .zst.  Also an object store URL read in place (s3://, gs://, az://, abfs://, "
                        "https://: one object, a prefix, or a glob on the key; docs/dataflow.md)")
    g.add_argument("--output", "-o", required=required, metavar="DIR", help="output directory for shards and job.json")
    g.add_argument("--tokenizer", "-t", metavar="SPEC",
                   help="tokenizer.json file, directory with tokenizer files, or Hugging Face hub id "
                        "(fast tokenizers only)")
    g.add_argument("--overwrite", action="store_true",
                   help="if OUTPUT holds a different plan, delete what shardprep wrote there (shards, plan, index, "
                        "logs; other files are kept) and start over (default: refuse)")

    add_stripe_arguments(p)
    tok = TokenizeOptions
    g = p.add_argument_group("documents")
    add_field(g, "--text-field", owner=tok, help="jsonl key / parquet or arrow column holding the text")
    add_field(g, "--txt-mode", owner=tok, choices=TXT_MODES,
              help="txt inputs: one document per line, or blank-line separated paragraphs")
    add_field(g, "--strict", owner=tok, action="store_true",
              help="fail on the first bad document (invalid UTF-8, empty, malformed JSON, missing field, "
                   "too long) instead of counting and skipping it")
    add_field(g, "--max-doc-bytes", owner=tok, type=size_arg, shown=size_text,
              help="documents longer than this are skipped as too_long (suffixes K, M, G)")

    add_chat_arguments(p)

    g = p.add_argument_group("tokens")
    add_field(g, "--eos", dest="add_eos", owner=tok, action=argparse.BooleanOptionalAction,
              help="append the EOS token to every document")
    add_field(g, "--bos", dest="add_bos", owner=tok, action=argparse.BooleanOptionalAction,
              help="prepend the BOS token to every document")
    add_field(g, "--eos-token", owner=tok, help="EOS token string (default: the tokenizer's own)")
    add_field(g, "--bos-token", owner=tok, help="BOS token string (default: the tokenizer's own)")
    add_field(g, "--allow-special-tokens", owner=tok, action="store_true",
              help="let special-token strings in raw text (e.g. <|endoftext|>) become control tokens; "
                   "by default they are encoded as plain text")
    add_field(g, "--backend", owner=tok, choices=BACKENDS,
              help="tokenizer backend; auto uses a faster one only after it reproduced the hf ids exactly")

    g = p.add_argument_group("shards and tasks")
    add_field(g, "--layout", owner=tok, choices=LAYOUTS,
              help="pack: samples of many documents (pretraining, ~1.02x raw token bytes); "
                   "doc: one sample per document (fine-tuning)")
    add_field(g, "--chunk-tokens", owner=tok, type=int,
              help="pack layout: tokens per sample (documents are never split)")
    add_field(g, "--target-task-bytes", owner=PlanOptions, type=size_arg, shown=size_text,
              help="input bytes per task, with suffixes K, M, G (e.g. 256M): pack smaller files together, split "
                   "larger uncompressed txt/jsonl (and parquet/arrow) files; default: chosen from the data "
                   "(docs/slurm.md, 'Task sizing')")
    add_field(g, "--one-file-per-task", owner=PlanOptions, action="store_true",
              help="one task (and one shard) per input file, whatever the sizes")
    add_field(g, "--parallel-tasks", owner=PlanOptions, type=count_arg(), metavar="N",
              help="tasks the cluster runs at once, for the default sizing (default: the executor's: local "
                   "workers, the Slurm partition's CPUs / --cpus-per-task, or --max-parallel)")


def plan_from_args(args: argparse.Namespace, task_slots: tuple[int, str] | None = None) -> tuple[Plan, Job]:
    """Plan and freeze the job of the command line; ``task_slots``: the executor's (job.sizing)."""
    from shardprep.api import plan_job

    if not args.input:
        raise ConfigError("--input is required (a file, directory, glob or @list)")
    if not args.tokenizer:
        raise ConfigError("--tokenizer is required (tokenizer.json, a directory, or a hub id)")
    layout = stripe_layout_from_args(args, default=DEFAULT_SHARD_LAYOUT)
    options, template = chat_from_args(args, from_fields(TokenizeOptions, args))
    return plan_job(args.input, args.output, args.tokenizer, options,
                    from_fields(PlanOptions, args), task_slots=task_slots, overwrite=args.overwrite,
                    prepare_dir=lambda out: prepare_output_dir(out, layout), storage=storage_from_args(args),
                    chat_template=template)


def add_chat_arguments(p: argparse.ArgumentParser) -> None:
    """``--chat`` and its options (docs/chat.md)."""
    g = p.add_argument_group("chat / SFT data (docs/chat.md)")
    add_field(g, "--chat", owner=TokenizeOptions, name="chat", dest="chat_data", action="store_const", const=True,
              help="records hold conversations (messages, ShareGPT conversations, or prompt/completion): "
                   "render them with the chat template and store which tokens are trained")
    add_field(g, "--messages-field", owner=ChatOptions, metavar="KEY",
              help="the field holding the conversation (default: messages, then conversations, then "
                   "prompt+completion)")
    g.add_argument("--chat-template", default=None, metavar="FILE",
                   help="a Jinja chat template (default: the tokenizer's own, from chat_template.jinja or "
                        "tokenizer_config.json beside tokenizer.json)")
    g.add_argument("--chat-template-name", default=None, metavar="NAME",
                   help="which of the tokenizer's named templates (default: 'default')")
    add_field(g, "--train-on", owner=ChatOptions, choices=TRAIN_ON,
              help="tokens with a label: every assistant turn and the end-of-turn marker closing it "
                   "(default), the last assistant turn only, or all tokens")
    add_field(g, "--train-thinking", owner=ChatOptions, action=argparse.BooleanOptionalAction,
              help="train the thinking (<think>...</think>) inside trained turns")


def chat_from_args(args: argparse.Namespace, options: TokenizeOptions) -> tuple[TokenizeOptions, ChatTemplate | None]:
    """The options with ``chat`` set when ``--chat`` was given (its template loaded, no BOS/EOS added: the
    template writes them), and the template to freeze; the chat options without ``--chat`` are refused."""
    if not args.chat_data:
        stray = [flag for flag, value in (("--messages-field", args.messages_field),
                                          ("--chat-template", args.chat_template),
                                          ("--chat-template-name", args.chat_template_name)) if value is not None]
        if stray:
            raise ConfigError(f"{stray[0]} needs --chat")
        return options, None
    from shardprep.chat.template import load_chat_template
    from shardprep.job.chat_plan import chat_options

    tokenizer = Path(args.tokenizer)
    if not tokenizer.exists() and args.chat_template is None:
        raise ConfigError(f"--chat with the hub tokenizer {args.tokenizer!r} needs --chat-template FILE",
                          hint="or save the tokenizer with its tokenizer_config.json and pass its directory")
    template = load_chat_template(tokenizer if tokenizer.exists() else Path("."), args.chat_template,
                                  args.chat_template_name)
    if options.layout != "pack":
        raise ConfigError("--chat writes the pack layout (a conversation's trained ranges are stored per chunk)",
                          hint="drop --layout doc")
    chat = chat_options(template, messages_field=args.messages_field, train_on=args.train_on,
                        train_thinking=args.train_thinking)
    return replace(options, chat=chat, add_eos=False, add_bos=False), template


def add_stripe_arguments(parser: argparse.ArgumentParser, *, default: StripeLayout = DEFAULT_SHARD_LAYOUT,
                         what: str = "progressive") -> None:
    """``--stripe-count/--stripe-size/--stripe-layout/--no-stripe`` for commands that create directories;
    ``default`` (described as ``what``) is the layout used when none of them is given."""
    g = parser.add_argument_group("Lustre striping (only on Lustre, only for a new empty directory)",
                                  f"Default layout: {what} ({' '.join(default.args)}).")
    g.add_argument("--stripe-count", type=int, default=None, help="plain layout: stripes per file (-1 = all OSTs)")
    g.add_argument("--stripe-size", default=None, help="plain layout: stripe size, e.g. 1M or 4M")
    g.add_argument("--stripe-layout", default=None, metavar="OPTIONS",
                   help="raw `lfs setstripe` options, e.g. '-E 256M -c 1 -E -1 -c 16 -S 4M'")
    g.add_argument("--no-stripe", action="store_true", help="leave the directory's inherited layout alone")


def stripe_layout_from_args(args: argparse.Namespace, *, default: StripeLayout) -> StripeLayout | None:
    """The layout the options ask for; None for ``--no-stripe``.  Conflicting options are a ConfigError."""
    plain = args.stripe_count is not None or args.stripe_size is not None
    chosen = [name for name, on in (("--no-stripe", args.no_stripe), ("--stripe-layout", args.stripe_layout),
                                     ("--stripe-count/--stripe-size", plain)) if on]
    if len(chosen) > 1:
        raise ConfigError(f"{' and '.join(chosen)} cannot be combined; pick one")
    if args.no_stripe:
        return None
    if args.stripe_layout is not None:
        return StripeLayout.from_raw(args.stripe_layout)
    if plain:
        return StripeLayout.plain(args.stripe_count, args.stripe_size)
    return default
