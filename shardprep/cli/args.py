"""Every argparse helper of the command line, and the one place where parsed values become option objects.

The library takes frozen option dataclasses (``TokenizeOptions``, ``PlanOptions``, ``LocalOptions``,
``SlurmOptions``, ``StageOptions``, ``UploadOptions``, ``ClientOptions``) and never sees argparse.
Defaults live once, in those classes: an option bound to a field with :func:`add_field` takes its
argparse default, and the default ``--help`` shows, from the field.  A test walks the whole parser to
keep every bound default equal to its field's.

Slurm options are the exception that proves the rule: their argparse default is ``SUPPRESS`` so that
``submit --resume`` can tell what the user typed from what the first submission recorded; the values not
typed come from the recorded options or the dataclass (:func:`slurm_options_from_args`).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from shardprep.errors import ConfigError
from shardprep.executor.slurm.options import TIME_FORMS, SlurmOptions
from shardprep.job.options import BACKENDS, TXT_MODES, PlanOptions, TokenizeOptions, parse_size
from shardprep.shard.format import LAYOUTS
from shardprep.storage.lustre import DEFAULT_SHARD_LAYOUT, StripeLayout, prepare_output_dir

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.job.plan import Plan
    from shardprep.job.schema import Job

# --------------------------------------------------------------------------------------- bound defaults


def field_default(owner: type, name: str) -> Any:
    """The default of dataclass field ``name`` of ``owner`` (``default_factory`` called)."""
    for f in dataclasses.fields(owner):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            raise TypeError(f"{owner.__name__}.{name} has no default")
    raise TypeError(f"{owner.__name__} has no field {name!r}")


def add_field(group: Any, *flags: str, owner: type, name: str | None = None,
              shown: Callable[[Any], Any] | None = None, **kwargs: Any) -> argparse.Action:
    """``add_argument`` for an option that sets field ``name`` (default: the flag's dest) of ``owner``.

    The argparse default is the field's default, through ``shown`` when given (``size_text``: ``16M``,
    which argparse passes through ``type`` like a typed value); ``default=argparse.SUPPRESS`` may be
    passed instead for options merged later.  The action remembers ``(owner, name)`` for the test.
    """
    name = name or kwargs.get("dest") or flags[0].lstrip("-").replace("-", "_")
    default = field_default(owner, name)
    kwargs.setdefault("default", shown(default) if shown else default)
    action = group.add_argument(*flags, **kwargs)
    action.bound_field = (owner, name)
    return action


def from_fields(owner: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """``owner(...)`` from the namespace entries named like its fields (missing ones keep their default)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(owner) if hasattr(args, f.name)}
    return owner(**{**values, **overrides})


def given_fields(owner: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``owner`` the command line set: namespace entries named like them that are not None
    (options with a ``SUPPRESS`` default are absent unless typed); lists become tuples (options are frozen)."""
    values = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(owner)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if v is not None}


def size_arg(text: str) -> int:
    """argparse ``type=`` for byte sizes: a bad value becomes a usage error (exit 2) naming the value."""
    try:
        return parse_size(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def count_arg(minimum: int = 1) -> Callable[[str], int]:
    """argparse ``type=`` for counts (workers, files, threads ...): an integer of at least ``minimum``.

    Why: ``--workers -2`` used to be accepted and fail later (a traceback from the thread pool) or be
    silently ignored; a bad count is a usage error (exit 2) that names the option and the value.
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is invalid: must be at least {minimum}")
        return value

    parse.__name__ = "count"     # argparse names the type in some messages
    return parse


def size_text(n: int | None) -> str | None:
    """``16777216`` -> ``16M``: a byte count as ``--help`` shows it and :func:`size_arg` reads it back."""
    if n is None:
        return None
    for suffix, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


# ------------------------------------------------------------------------------------- plan and tokens


def add_plan_arguments(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """Inputs, output, tokenizer, striping and every ``TokenizeOptions``/``PlanOptions`` field."""
    g = p.add_argument_group("inputs and outputs")
    g.add_argument("--input", "-i", action="append", required=False, metavar="PATH",
                   help="input file, directory (walked recursively), glob, or @FILE listing paths; repeatable. "
                        "Types: .txt, .jsonl, .parquet, .arrow, or a save_to_disk directory; txt/jsonl may be "
                        ".gz or .zst")
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
              help="input bytes per task: pack smaller files together, split larger uncompressed txt/jsonl "
                   "(and parquet/arrow) files; default: chosen from the data (docs/slurm.md, 'Task sizing')")
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
    return plan_job(args.input, args.output, args.tokenizer, from_fields(TokenizeOptions, args),
                    from_fields(PlanOptions, args), task_slots=task_slots, overwrite=args.overwrite,
                    prepare_dir=lambda out: prepare_output_dir(out, layout))


# -------------------------------------------------------------------------------------- Lustre striping


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


# ------------------------------------------------------------------------------------- S3 transfers


def add_transfer_arguments(p: argparse.ArgumentParser, owner: type, *, what: str, part_help: str) -> None:
    """Filters, concurrency, part size, dry run, output mode, progress and the S3 connection options.

    ``owner`` is ``StageOptions`` or ``UploadOptions`` (their defaults differ); ``what`` names the things
    filtered ("keys (below the prefix)" or "files (relative paths)").
    """
    add_field(p, "--include", owner=owner, action="append", default=[], metavar="GLOB",
              help=f"only {what} matching this glob; repeatable; * also matches /")
    add_field(p, "--exclude", owner=owner, action="append", default=[], metavar="GLOB",
              help=f"skip {what} matching this glob; repeatable; applied after --include")
    add_field(p, "--concurrency", owner=owner, type=int, help="objects and parts transferred at once")
    add_field(p, "--part-size", owner=owner, name="multipart_chunksize", type=size_arg, shown=size_text,
              help=part_help)
    p.add_argument("--dry-run", action="store_true", help="list what would be transferred and the total bytes; "
                                                          "transfer nothing")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    add_field(p, "--progress", owner=owner, action=argparse.BooleanOptionalAction,
              help="byte progress bar on stderr; unset means only when stderr is a terminal")
    from shardprep.cli._s3 import add_s3_arguments

    add_s3_arguments(p)


def transfer_options_from_args(owner: type, args: argparse.Namespace, **extra: Any) -> Any:
    """``StageOptions``/``UploadOptions`` from the transfer options; ``extra`` sets the command's own fields.

    One part size serves as both the multipart threshold and the part size, and the connection pool is
    sized for ``concurrency`` object workers plus as many part requests.
    """
    from shardprep.cli._s3 import client_options_from_args

    client = client_options_from_args(args, max_pool_connections=max(10, 2 * args.concurrency + 4))
    return owner(source=args.source, dest=args.dest, include=tuple(args.include), exclude=tuple(args.exclude),
                 concurrency=args.concurrency, multipart_threshold=args.part_size,
                 multipart_chunksize=args.part_size, progress=args.progress, client=client, **extra)


# ------------------------------------------------------------------------------------ executors, Slurm

_SLURM_HELP = {
    "partition": "partition (queue) for the array tasks and the finalize job",
    "account": "account to charge",
    "qos": "quality of service",
    "time": f"time limit per task ({TIME_FORMS}); default: the partition's",
    "mem": "memory per task, e.g. 16G; default: the partition's",
    "cpus_per_task": "CPUs per task (default {}); the tokenizer uses exactly this many threads",
    "constraint": "node features required, e.g. 'skylake|icelake'",
    "max_parallel": "at most this many tasks run at once (the %N throttle), shared by all arrays of the "
                    "submission even when MaxArraySize splits it; default: no limit",
    "extra_sbatch": "an extra sbatch option, e.g. 'exclusive', 'gres=gpu:1' or '#SBATCH --nice=10' (repeatable)",
    "signal_seconds": "send USR1 this many seconds before the time limit (default {}) so a task stops at a "
                      "safe point and is requeued",
    "job_name": "Slurm job name prefix (default {})",
    "max_requeues": "requeue a task that stopped at its time limit at most this many times (default {}); "
                    "then it fails with a message to raise --time or use smaller tasks (--target-task-bytes)",
}
# SlurmOptions field -> command-line flag (the flag's dest is the field name except for --sbatch-extra)
_SLURM_FLAGS = {name: "--" + name.replace("_", "-") for name in _SLURM_HELP} | {"extra_sbatch": "--sbatch-extra"}
_SLURM_KWARGS: dict[str, dict[str, Any]] = {
    "cpus_per_task": {"type": int}, "max_parallel": {"type": int}, "signal_seconds": {"type": int},
    "max_requeues": {"type": int},
    "extra_sbatch": {"action": "append", "metavar": "OPTION", "dest": "extra_sbatch"},
}

DEFAULT_SLURM = SlurmOptions()     # frozen: one shared value for the defaults below


def add_slurm_arguments(parser: argparse.ArgumentParser, *, title: str | None = None,
                        only: Sequence[str] | None = None, helps: dict[str, str] | None = None,
                        defaults: SlurmOptions = DEFAULT_SLURM) -> None:
    """The Slurm options (used with ``--executor slurm`` or ``submitit``) as their own help group.

    With ``submit --resume OUTPUT`` every option not given again keeps the value of the last submission
    recorded in ``OUTPUT/slurm/jobs.json``.  ``only`` limits the group to some ``SlurmOptions`` fields,
    for jobs where the others mean nothing (the stage job has no array to throttle); ``helps`` replaces
    help texts by field; ``defaults`` are the values the help names (a "{}" in a help text).
    """
    g = parser.add_argument_group(title or "Slurm options (with --executor slurm or submitit; --resume "
                                           "reuses the last submission's values unless given again)")
    for name, text in _SLURM_HELP.items():
        if only is None or name in only:
            text = (helps or {}).get(name, text).replace("%", "%%")
            add_field(g, _SLURM_FLAGS[name], owner=SlurmOptions, name=name, default=argparse.SUPPRESS,
                      help=text.format(getattr(defaults, name)), **_SLURM_KWARGS.get(name, {}))


def slurm_options_from_args(args: argparse.Namespace, base: SlurmOptions = DEFAULT_SLURM) -> SlurmOptions:
    """``base`` (the dataclass defaults, a recorded submission's options ...) with the options typed."""
    return dataclasses.replace(base, **given_fields(SlurmOptions, args))     # SlurmOptions validates them


def add_executor_arguments(g: Any) -> None:
    """The executor choice and ``LocalOptions``; the Slurm options are :func:`add_slurm_arguments`."""
    from shardprep.executor import EXECUTORS
    from shardprep.executor.local import LocalOptions

    g.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="local: process pool here; slurm: sbatch job array; submitit: submitit on Slurm "
                        "(default: local, or with --resume the executor of the last Slurm submission)")
    add_field(g, "--workers", owner=LocalOptions, type=int,
              help="local executor: parallel task processes (default: usable CPUs)")
    add_field(g, "--no-progress", dest="show_progress", owner=LocalOptions, action="store_false",
              help="local executor: no progress bar")


def executor_from_args(args: argparse.Namespace, resume: Path | None = None) -> tuple[str, Any]:
    """(executor name, its options).  With ``resume`` and no ``--executor``: the executor of the last
    recorded Slurm submission (else local), and Slurm options not typed again keep its values."""
    from shardprep.executor import executor_class
    from shardprep.executor.slurm.jobs import last_submission

    last = last_submission(resume) if resume else None
    name = args.executor or (last.executor if last else "local")
    cls = executor_class(name)
    return name, cls.options_for(given_fields(cls.Options, args), last)


# ------------------------------------------------------------------------------------- stage as a job


def add_stage_submit_arguments(parser: argparse.ArgumentParser) -> None:
    """``--submit``, ``--then-tokenize`` and the Slurm placement options of the stage job."""
    from shardprep.executor.slurm.stage_job import STAGE_JOB_OPTIONS

    g = parser.add_argument_group("Slurm (with --submit)")
    g.add_argument("--submit", action="store_true",
                   help="run the stage as a Slurm batch job instead of here; prints the job id")
    g.add_argument("--then-tokenize", nargs=argparse.REMAINDER, default=None, metavar="SUBMIT_ARGS",
                   help="must come last: after a successful stage the job runs `shardprep submit --executor "
                        "slurm --input DEST SUBMIT_ARGS...`, e.g. --then-tokenize --output /fsx/shards "
                        "--tokenizer gpt2 --cpus-per-task 8")
    add_slurm_arguments(parser, title="Slurm options of the stage job (with --submit; the tokenize job's go "
                                      "after --then-tokenize)",
                        only=("partition", "account", "qos", "time", "mem", "cpus_per_task", "constraint",
                              "extra_sbatch", "job_name"),
                        helps={"partition": "partition (queue) of the stage job",
                               "time": "time limit of the stage job; default: the partition's",
                               "mem": "memory of the stage job, e.g. 8G; default: the partition's",
                               "cpus_per_task": "CPUs of the stage job (default {}): hashing and TLS for the "
                                                "concurrent transfers"},
                        defaults=STAGE_JOB_OPTIONS)


def stage_job_from_args(args: argparse.Namespace, dest: Path) -> tuple[SlurmOptions, list[str] | None]:
    """(the stage job's Slurm options, the checked ``submit`` argv it runs afterwards or None)."""
    from shardprep.executor.slurm.stage_job import STAGE_JOB_OPTIONS

    then = args.then_tokenize
    if then is not None and not then:
        raise ConfigError("--then-tokenize needs the options of `shardprep submit` after it (at least --output "
                          "and --tokenizer)")
    return slurm_options_from_args(args, STAGE_JOB_OPTIONS), check_then_tokenize(dest, then) if then else None


def check_then_tokenize(dest: Path, submit_args: Sequence[str]) -> list[str]:
    """The full ``submit`` argument list the stage job will run, parsed now so mistakes fail on the login
    node (argparse exits 2 naming a bad option)."""
    from shardprep.cli.main import build_parser
    from shardprep.executor.slurm.render import unsafe_path_problem

    args = list(submit_args)
    for forbidden in ("--input", "-i", "--resume", "--dry-run"):
        if any(a == forbidden or a.startswith(forbidden + "=") for a in args):
            raise ConfigError(f"--then-tokenize ... {forbidden}: not allowed here (the input is DEST, "
                              f"{dest}, and the job submits for real)")
    if not any(a == "--executor" or a.startswith("--executor=") for a in args):
        args = ["--executor", "slurm", *args]
    full = ["--input", str(dest), *args]
    parsed = build_parser("submit").parse_args(["submit", *full])
    if not parsed.output:
        raise ConfigError("--then-tokenize needs --output DIR (where the shards go)")
    if parsed.executor == "local":
        raise ConfigError("--then-tokenize with --executor local would tokenize inside the stage job",
                          hint="use --executor slurm (default) or submitit")
    problem = unsafe_path_problem(Path(parsed.output))
    if problem:
        raise ConfigError(f"--then-tokenize --output {parsed.output}: the path {problem}")
    return full
