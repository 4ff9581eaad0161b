"""Exceptions with meaningful exit codes.

Every error a user can cause is a ``ShardprepError`` subclass carrying an exit code, so the CLI's single
error boundary (``shardprep.cli.main``) can print one line and exit with a code that scripts (and Slurm,
which records a task's exit code) can act on.  Internal bugs stay ordinary exceptions (exit 1, traceback).
"""

from __future__ import annotations

# Exit codes.  Documented in docs/architecture.md; keep the two in step.
EXIT_OK = 0
EXIT_INTERNAL = 1          # a bug: unexpected exception
EXIT_USAGE = 2             # bad command line or configuration (the command-line parser uses 2 as well)
EXIT_INPUT = 3             # bad or unreadable input data, zero documents, strict-mode violation
EXIT_PLAN_CONFLICT = 4     # the output directory cannot be used as asked: a different plan, in use, foreign files
EXIT_INCOMPLETE = 5        # tasks missing or failed, verification failed
EXIT_TOKENIZER = 6         # tokenizer cannot be loaded, is slow, or lacks a required special token
EXIT_TRANSFER = 7          # S3 / staging failures
EXIT_ENVIRONMENT = 8       # the machine cannot run the job (no sbatch, lfs failed, no space)
EXIT_REQUEUE = 75          # EX_TEMPFAIL: stopped on a pre-timeout signal; safe to requeue
EXIT_INTERRUPTED = 130     # Ctrl-C (128 + SIGINT, as a shell reports it): stopped, only complete files kept


class ShardprepError(Exception):
    """Base class: a user-facing error with an exit code and an optional hint (the next step)."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:  # one line for the CLI, hint appended
        base = super().__str__()
        return f"{base} (hint: {self.hint})" if self.hint else base


class ConfigError(ShardprepError):
    """An option or configuration value is invalid; the message names the option and the value."""

    exit_code = EXIT_USAGE


class InputDataError(ShardprepError):
    """Input is missing, unreadable or violates the strict policy; the message names file and line."""

    exit_code = EXIT_INPUT


class RecordError(InputDataError):
    """An on-disk record (job.json, the plan's task records, a sidecar, index.json) is unreadable or
    malformed; the message names the file and the field."""


class PlanConflictError(ShardprepError):
    """The output directory already holds a different frozen plan."""

    exit_code = EXIT_PLAN_CONFLICT


class OutputInUseError(ShardprepError):
    """Another shardprep run holds the output directory's lock (``storage.lock``); the message names it."""

    exit_code = EXIT_PLAN_CONFLICT


class PlantedLinkError(ShardprepError):
    """A symbolic link (or a file where a directory belongs) at a name shardprep writes under its output
    directory (``storage/nofollow.py``): refused, never followed, so nothing outside it is written."""

    exit_code = EXIT_PLAN_CONFLICT


class IncompleteError(ShardprepError):
    """Some tasks are missing or failed, or a shard does not verify."""

    exit_code = EXIT_INCOMPLETE


class TokenizerError(ShardprepError):
    """The tokenizer cannot be used (missing, slow/Python-only, no EOS when one is required, ...)."""

    exit_code = EXIT_TOKENIZER


class TransferError(ShardprepError):
    """An S3 transfer failed after retries."""

    exit_code = EXIT_TRANSFER


class EnvironmentProblem(ShardprepError):
    """The environment cannot run the job: a tool is missing or failed (message names it and its stderr)."""

    exit_code = EXIT_ENVIRONMENT


class DiskFull(EnvironmentProblem):
    """A write failed for lack of space or quota; the message names the file and the space left."""


class Preempted(ShardprepError):
    """The task received its pre-timeout signal and stopped at a safe point; Slurm should requeue it."""

    exit_code = EXIT_REQUEUE
