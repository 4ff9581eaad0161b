"""The next command after tasks failed: one wording for the local executor, ``status`` and ``finalize``.

Why this needs care: a plan freezes its inputs (paths, sizes, mtimes) and every option that changes shard
bytes.  ``submit --resume`` reruns that frozen plan, so it fixes what lies outside it (a full disk, a
killed node, a time limit, a file's permissions) but never a wrong ``--text-field`` or an input that had
to be edited: the retry fails the same way, and the same command with the new option is refused as a
different plan.  Those need a new plan: the command with the change and ``--overwrite`` (or a new
``--output``).  An input error (exit 3) almost always means one of those, so its advice leads there.
"""

from __future__ import annotations

import re
from pathlib import Path

from shardprep.errors import EXIT_INPUT
from shardprep.job import logs

# How a task that stopped on a signal at a safe point ends its log (``logs.STOPPED``, raised by job/encode.py's
# ``StopFlag.check`` and logged as its failure): Ctrl-C in a local ``submit``, a Slurm pre-timeout signal or
# scancel.  Nothing to fix.
_STOPPED_RE = re.compile("^" + re.escape(logs.STOPPED).replace("%d", r"\d+").replace("%s", r".+?"))


def resume_command(output: Path | str) -> str:
    return f"shardprep submit --resume {output}"


def replan_advice(output: Path | str) -> str:
    """What to run once an input or a plan option (text field, txt mode, --strict ...) had to change."""
    return (f"after changing an input or an option (e.g. --text-field COL), re-run the submit command with the "
            f"change and --overwrite (or a new --output): `{resume_command(output)}` reruns the frozen plan as "
            f"it is")


def rerun_advice(output: Path | str, exit_codes: set[int] | None = None) -> str:
    """The next step for tasks that failed with ``exit_codes`` (None: not known).

    Only input errors: re-plan.  None of them: fix the cause and resume.  Unknown or mixed: both, the
    resume first (it is right for most failures and costs nothing when it is not).
    """
    if exit_codes and exit_codes <= {EXIT_INPUT}:
        return f"fix the input or the option named above; {replan_advice(output)}"
    resume = f"fix the cause, then `{resume_command(output)}` (runs exactly the tasks not done)"
    if exit_codes and EXIT_INPUT not in exit_codes:
        return resume
    return f"{resume}; {replan_advice(output)}"


def stopped_on_signal(reason: str | None) -> bool:
    """Whether a task's logged failure ``reason`` is a stop on a signal (interrupted), not an error."""
    return reason is not None and _STOPPED_RE.match(reason) is not None


def interrupted_advice(output: Path | str) -> str:
    """The next step once tasks were stopped (Ctrl-C, a signal) rather than failed: nothing to fix."""
    return f"the run was interrupted before these tasks finished: `{resume_command(output)}` continues it"
