"""What ``submit --resume DIR`` applies, and what it refuses instead of dropping.

``--resume`` reruns the plan frozen in DIR as it is.  The executor and its options apply (local workers,
Slurm placement, limits and throttle): they never change a shard's bytes.  The plan's own options cannot:
they are frozen and fingerprinted with it.  They used to be dropped silently, so after a wrong
``--text-field`` the suggested ``submit --resume DIR --text-field content`` failed exactly as before.  A
plan option typed with ``--resume`` that differs from the frozen plan (or that cannot apply to an existing
plan at all, such as striping) is now refused in one line naming each, with the command that does apply it:
a re-plan with ``--overwrite``.  One typed with the plan's own value is harmless and accepted.

argparse cannot tell a typed default from an untyped option, so the typed command line is parsed again
for the plan options alone, into a namespace where every untyped option keeps a marker.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from shardprep.cli.args import size_arg, size_text
from shardprep.cli.plan import add_plan_arguments, add_small_tasks_argument
from shardprep.errors import ConfigError, PlanConflictError
from shardprep.job.schema import Job

_NOT_PLAN_OPTIONS = ("output", "overwrite", "force_small_tasks")


class _Untyped(list):
    """The marker of an option not typed (a list, so that ``append`` options can copy it)."""


def _plan_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    add_plan_arguments(p, required=False)
    add_small_tasks_argument(p)
    return p


def typed_plan_options(argv: Sequence[str]) -> dict[str, Any]:
    """``{dest: value}`` of the plan options typed in ``argv`` (the command line after global options)."""
    words = list(argv)
    start = next((i + 1 for i, w in enumerate(words) if not w.startswith("-")), len(words))  # after the command
    parser = _plan_parser()
    marker = _Untyped()
    namespace = argparse.Namespace(**{a.dest: marker for a in parser._actions})
    parser.parse_known_args(words[start:], namespace=namespace)
    return {k: v for k, v in vars(namespace).items() if v is not marker}


def _flag(action: argparse.Action, value: Any) -> str:
    """How option ``action`` with ``value`` is typed: ``--text-field content``, ``--no-eos``, ``--layout doc``."""
    if isinstance(action, argparse.BooleanOptionalAction):     # option_strings: --eos, --no-eos
        return action.option_strings[0 if value else 1]
    flag = max(action.option_strings, key=len)
    if action.nargs == 0:
        return flag
    return f"{flag} {size_text(value) if action.type is size_arg else value}"


def _plan_has(action: argparse.Action, frozen: dict[str, Any]) -> str:
    """What the frozen plan has instead of the typed ``action``: a flag it was made without is named so
    (``--strict`` typed, a plan without it), never as if the plan had it."""
    if action.dest not in frozen:
        return "the output directory and its plan exist already"
    value = frozen[action.dest]
    if value is None:
        return "the plan has none"
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction) and not value:
        return f"the plan was made without {_flag(action, True)}"
    return f"the plan has {_flag(action, value)}"


def _same_tokenizer(typed: str, source: str) -> bool:
    """``--tokenizer`` typed as the plan's own (the same text, or the same file): harmless with --resume."""
    return typed == source or Path(typed).resolve() == Path(source).resolve()


def _frozen_values(job: Job) -> dict[str, Any]:
    """The plan options a frozen plan records, by argparse dest."""
    return {**job.options.to_dict(), "target_task_bytes": job.target_task_bytes,
            "one_file_per_task": job.sizing.rule == "one-file-per-task", "parallel_tasks": job.sizing.parallel_tasks}


def refuse_unapplied_options(args: argparse.Namespace, output: Path, job: Job) -> None:
    """ConfigError naming every typed plan option the frozen plan in ``output`` would not apply."""
    if args.overwrite:
        raise ConfigError(f"--resume {output} continues the frozen plan and --overwrite replaces it: give one",
                          hint="to re-plan with other options, run the submit command without --resume")
    typed = typed_plan_options(getattr(args, "typed_argv", None) or [])
    ignored = _unapplied(typed, job)
    if ignored:
        inputs = " ".join(f"--input {v}" for v in typed.get("input") or ["INPUTS"])
        flags = " ".join(f for dest, f, _ in ignored if dest not in ("input", "tokenizer"))
        raise ConfigError(
            f"--resume {output} reruns its frozen plan as it is and would not apply "
            + ", ".join(f"{f} ({why})" for _, f, why in ignored),
            hint=f"drop them to resume, or re-plan with them: shardprep submit {inputs} --tokenizer "
                 f"{typed.get('tokenizer') or job.tokenizer.source} --output {output} {flags} --overwrite "
                 f"(this deletes the job's shards)".replace("  ", " "))


def _unapplied(typed: dict[str, Any], job: Job) -> list[tuple[str, str, str]]:
    """(dest, the option as typed, what the plan has instead) of each typed option the plan would not apply.

    A lone ``--input``/``-i`` or ``--tokenizer``/``-t`` (without the other, it is no whole command line to
    check against the plan) is judged here like any plan option: a tokenizer naming the plan's own is harmless.
    """
    frozen = _frozen_values(job)
    actions = {a.dest: a for a in _plan_parser()._actions}
    ignored: list[tuple[str, str, str]] = []
    for dest, value in typed.items():
        if dest in _NOT_PLAN_OPTIONS or frozen.get(dest, object()) == value:
            continue
        if dest == "input":
            ignored.append((dest, " ".join(f"--input {v}" for v in value), "its inputs are frozen; --input "
                            "with --tokenizer is a whole command line, checked against the plan"))
        elif dest == "tokenizer":
            if not _same_tokenizer(value, job.tokenizer.source):
                ignored.append((dest, f"--tokenizer {value}", f"the plan has --tokenizer {job.tokenizer.source}"))
        else:
            ignored.append((dest, _flag(actions[dest], value), _plan_has(actions[dest], frozen)))
    return ignored


def replan_conflict(error: PlanConflictError, output: Path) -> PlanConflictError:
    """The conflict of a ``--resume`` given with a full, different command line, with the way out."""
    message = str(error.args[0]) if error.args else str(error)
    return PlanConflictError(message, hint=f"--resume {output} reruns the frozen plan as it is: drop the options "
                                           "that differ, or re-plan with them (the same command without --resume, "
                                           "with --overwrite: this deletes the job's shards)")
