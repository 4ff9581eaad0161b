"""Root of the ``shardprep`` command line.

Each command lives in its own module under ``shardprep.cli`` and exposes ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``.  This module only wires them up and owns the single
error boundary: a ``ShardprepError`` becomes one line on stderr and its exit code; anything else is a bug
and keeps its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import signal
import sys
from typing import NoReturn, Sequence

from shardprep import __version__
from shardprep.errors import EXIT_INTERRUPTED, EXIT_USAGE, ShardprepError
from shardprep.job.resources import no_blas_threads
from shardprep.logsafe import protect, redact
from shardprep.records import FS_BYTES

# Module names under shardprep.cli, in the order `shardprep --help` lists them.
COMMANDS: tuple[str, ...] = (
    "submit",
    "plan",
    "status",
    "finalize",
    "verify",
    "repair",
    "inspect",
    "report",
    "mix",
    "trace",
    "demo",
    "export_hf",
    "doctor",
    "stage",
    "upload",
    "run_task",
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (taken from the option dataclasses, see ``cli.args``) and keeps
    description paragraphs as written.

    A default is appended unless the help already says what happens by default, or it says nothing:
    None (unset), flags (``store_true``/``store_false``: the help says what the flag does) and empty
    repeatable lists.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        quiet = (action.default in (None, argparse.SUPPRESS, []) or "default" in text
                 or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
                 or not action.option_strings)
        return text if quiet else f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line and a pointer to ``--help``.

    Why: ``--executor slrum`` printed the whole usage (25 lines for ``submit``) before the one line that
    names the valid choices; the usage is one ``--help`` away.  Subcommand parsers are of this class too
    (``add_subparsers`` uses the parent's class).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n  see `{self.prog} --help`\n")


def command_module(argv: Sequence[str]) -> str | None:
    """The module of the command ``argv`` names (its first non-option word), if it is one of ours.

    Why: every Slurm array task starts with ``shardprep run-task``; importing all twelve command modules
    (staging, doctor, HF export ...) to parse one command line cost each task ~0.1 s.  Command ``NAME`` s
    are their module names with ``-`` for ``_`` (a test keeps it so).
    """
    word = next((a for a in argv if not a.startswith("-")), None)
    mod_name = word.replace("-", "_") if word else None
    return mod_name if mod_name in COMMANDS else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` just that command's module imported and wired up."""
    parser = Parser(
        prog="shardprep",
        description="Tokenize raw text into WebDataset shards with a Slurm job array, and load them for DDP.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shardprep {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod_name in COMMANDS if only is None else (only,):
        mod = importlib.import_module(f"shardprep.cli.{mod_name}")
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP),
                           formatter_class=HelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    no_blas_threads()       # before anything imports numpy (job.resources says why)
    # Ctrl-C must work even when started from a shell that set SIGINT to "ignore" (background jobs of a
    # non-interactive script inherit that): restore Python's KeyboardInterrupt handler.
    with contextlib.suppress(ValueError):  # ValueError: not the main thread (main() called by a test)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # printed paths may hold bytes that are not UTF-8 (a file name): \xNN, never an encoding error
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):   # not a text stream we may reconfigure
            stream.reconfigure(errors=FS_BYTES)  # type: ignore[union-attr]
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_module(argv))
    args = parser.parse_args(argv)
    args.typed_argv = argv       # what was typed, for commands that must tell a typed default from none
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # -v is shardprep's debug, never botocore's request dumps (credentials) or its INFO chatter (logsafe.py)
    protect(logging.getLogger().handlers)
    try:
        return int(args._run(args) or 0)
    except ShardprepError as e:
        print(f"shardprep {args.command}: error: {redact(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"shardprep {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
