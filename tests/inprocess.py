"""Run the real CLI in this process, as a fresh ``python -m shardprep`` would, but without paying for the
interpreter and imports: the exit code, stdout and stderr (the task processes' too: they inherit file
descriptors 1 and 2) come back as a ``CompletedProcess``.  What a fresh process would not carry over is put
back afterwards: the environment, signal handlers, the root logger's handlers and level, the working
directory.  Tests about the process itself (signals, start-up, the environment before numpy loads) start a
real one (``run_cli(..., process=True)`` or ``subprocess``)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence

_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP,
                             signal.SIGALRM, signal.SIGCHLD))


def _forget_clients() -> None:
    """A fresh process has no S3 client and no fsspec file system yet: one cached by an earlier call was
    made from that call's environment (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST, credentials), which a test
    may have changed since; nor has it learnt that slurmctld is down (a test may have put stand-ins on PATH)."""
    slurm = sys.modules.get("shardprep.executor.slurm.commands")
    if slurm is not None:
        slurm.forget_controller()
    for name in ("shardprep.storage.s3.client", "shardprep.storage.s3"):
        clients = getattr(sys.modules.get(name), "_CLIENTS", None)
        if isinstance(clients, dict):
            clients.clear()
    spec = sys.modules.get("fsspec.spec")
    if spec is not None:
        todo = [spec.AbstractFileSystem]
        while todo:
            cls = todo.pop()
            cls.clear_instance_cache()
            todo.extend(cls.__subclasses__())


@contextlib.contextmanager
def _fresh_process_state(env: dict[str, str] | None) -> Iterator[None]:
    saved_env, cwd = dict(os.environ), os.getcwd()
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = []
    os.environ.update(env or {})
    _forget_clients()
    try:
        yield
    finally:
        for h in root.handlers:
            with contextlib.suppress(Exception):
                h.close()
        root.handlers, root.level = saved_handlers, saved_level
        for s, h in handlers.items():
            if h is not None:
                signal.signal(s, h)
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(cwd)


@contextlib.contextmanager
def _captured_fds() -> Iterator[tuple[tempfile._TemporaryFileWrapper, tempfile._TemporaryFileWrapper]]:
    """Point fds 1 and 2 (and sys.stdout/sys.stderr) at temporary files, as a child process's pipes."""
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    streams = sys.stdout, sys.stderr
    for s in streams:
        with contextlib.suppress(Exception):
            s.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", line_buffering=True)
    try:
        yield out, err
    finally:
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                s.flush()
        sys.stdout, sys.stderr = streams
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _read(f: tempfile._TemporaryFileWrapper) -> str:
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")


def run_in_process(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``shardprep ARGV`` through ``cli.main.main`` in this process; see the module docstring."""
    from shardprep.cli.main import main

    with _captured_fds() as (out, err), _fresh_process_state(env):
        try:
            code = main(list(argv))
        except SystemExit as e:          # argparse's usage errors, --help
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        for s in (sys.stdout, sys.stderr):
            s.flush()
        stdout, stderr = _read(out), _read(err)
    out.close()
    err.close()
    return subprocess.CompletedProcess(["shardprep", *argv], code, stdout, stderr)
