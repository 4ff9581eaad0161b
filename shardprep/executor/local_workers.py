"""The local pool's worker processes: what runs in them, how they die with their parent, and how the parent
stops them.

Why this is its own module: a ``ProcessPoolExecutor`` left to itself keeps orphans alive (a worker whose
parent was killed finishes every queued task, then blocks on its queue for ever), drains the whole queue
on Ctrl-C, and reports a killed worker as a bare ``BrokenProcessPool``.  Here:

- every worker asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``; a parent-pid
  watchdog thread where that does not exist) and leaves after the task it is in when the parent is gone;
- SIGTERM makes a running task stop at its next safe point (it drops its temporary shard), after which
  the worker exits; an idle worker simply dies;
- workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and the parent alone
  decides how to stop (``stop_workers``), so no worker starts another task meanwhile;
- workers announce the task they start and finish, so the parent can name the task a dead worker was
  running and how it died (signal name or exit code).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from shardprep.errors import EXIT_REQUEUE, Preempted, ShardprepError
from shardprep.job.resources import describe_exit, die_with_parent

log = logging.getLogger(__name__)

_WATCHDOG_POLL_S = 0.5

# Set in each worker by ``init_worker``.  Neither needs a lock, on purpose: a worker killed while holding
# a shared lock (a multiprocessing Queue's or Event's) would deadlock the parent that stops it.
_parent_pid = 0
_direct_parent = 0           # the fork server the worker came from (its parent pid at start)
_events: Any = None          # write end of a pipe to the parent; messages < PIPE_BUF are written atomically
_stop: Any = None            # shared byte (RawValue): 1 once the parent is stopping the pool


# -- in the worker -------------------------------------------------------------------------------------

def stopping() -> bool:
    return _stop is not None and bool(_stop.value)


def init_worker(parent_pid: int, events: Any, stop: Any, environ: dict[str, str] | None = None,
                cwd: str | None = None) -> None:
    """ProcessPoolExecutor initializer: tie this worker's life to ``parent_pid`` (the process that runs the
    pool), and give it that process's environment and working directory as they are now.

    Workers are forked from a fork server (``executor.local``) started once per process: a worker inherits
    the server's environment, which may be older than the pool's (a test, or a long-lived process that
    imports shardprep), so the pool's own is passed here.  The kernel's PDEATHSIG follows the worker's
    parent, the server, which itself dies with the pool's process (``executor.forkserver_guard``); the
    pool's process is also watched by pid."""
    global _parent_pid, _direct_parent, _events, _stop
    _parent_pid, _events, _stop = parent_pid, events, stop
    _direct_parent = os.getppid()
    if environ is not None and environ != dict(os.environ):
        os.environ.clear()
        os.environ.update(environ)
    if cwd is not None:
        os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGTERM)
    threading.Thread(target=_watch_parent, name="parent-watchdog", daemon=True).start()
    if _parent_gone():  # the parent died before the kernel knew whom to watch
        os._exit(EXIT_REQUEUE)


def _parent_gone() -> bool:
    """The pool's process is gone: our own parent changed (orphaned), or its pid is gone or a zombie."""
    if os.getppid() != _direct_parent:
        return True
    try:
        with open(f"/proc/{_parent_pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True
    except OSError:             # no /proc: ask the kernel whether the pid exists
        try:
            os.kill(_parent_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False


def _watch_parent() -> None:
    """Poll the pool's process and send ourselves SIGTERM once it is gone (a second line of defence: PDEATHSIG
    follows the fork server, and does not exist outside Linux)."""
    while not _parent_gone():
        time.sleep(_WATCHDOG_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


Outcome = tuple[int, str, str, str, list[str]]   # task, status, message, error class name, input warnings


def run_in_worker(output: str, task: int, threads: int) -> Outcome:
    """Run one task; return its outcome as plain values, so nothing needs to unpickle.

    A task stopped by SIGTERM (the parent is stopping, or died) ends the worker: its temporary shard is
    already gone, and a worker that went back to its queue would start the next task or hang.  So does
    any task, however it ended, once the parent is gone or stopping.
    """
    from shardprep.job.task import run_task

    try:
        if stopping():
            return task, "error", "not started: the run is stopping", "", []
        _send(("start", task, os.getpid()))
        try:
            result = run_task(Path(output), task, progress=_progress_sender(), threads=threads)
            warnings = [] if result.skipped_existing else list(result.sidecar.warnings)
            return task, "skipped" if result.skipped_existing else "done", "", "", warnings
        except Preempted:
            os._exit(EXIT_REQUEUE)
        except ShardprepError as e:
            return task, "error", f"{type(e).__name__}: {e}", type(e).__name__, []
        except Exception as e:  # a bug: keep the type and message, the task log has the traceback
            logging.getLogger(__name__).exception("task %d crashed", task)
            return task, "error", f"{type(e).__name__}: {e}", "", []
        finally:
            _send(("end", task, os.getpid()))
    finally:
        if _parent_gone() or stopping():
            os._exit(EXIT_REQUEUE)


def _send(message: tuple) -> None:
    """One event to the parent; a parent that is gone is not an error here (the exit checks handle it)."""
    if _events is not None:
        try:
            _events.send(message)
        except OSError:
            pass


def _progress_sender() -> Callable[[int, int], None]:
    """A ``run_task`` progress callback sending (documents, tokens) at most every 0.3 s."""
    pending = [0, 0, time.monotonic()]

    def progress(docs: int, tokens: int) -> None:
        pending[0] += docs
        pending[1] += tokens
        if time.monotonic() - pending[2] > 0.3:
            _send(("progress", pending[0], pending[1]))
            pending[:] = [0, 0, time.monotonic()]

    return progress


# -- in the parent -------------------------------------------------------------------------------------

@dataclass
class WorkerEvents:
    """Reads the workers' events on a thread: which task each worker runs, and the progress bar.

    ``reader``/``events`` are the two ends of one pipe (``ctx.Pipe(duplex=False)``); the workers get
    ``events`` through the pool initializer.
    """

    reader: Any
    events: Any
    n_tasks: int
    show_progress: bool
    running: dict[int, int] = field(default_factory=dict)      # worker pid -> task
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._read, name="worker-events", daemon=True)
        self._thread.start()

    def running_tasks(self) -> dict[int, int]:
        with self._lock:
            return dict(self.running)

    def finished(self, task: int, status: str) -> None:
        """The parent saw a task's result (moves the progress bar)."""
        self.events.send(("task", task, status))

    def stop(self) -> None:
        self.events.send(("quit", 0, 0))
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _read(self) -> None:
        bar = _bar(self.n_tasks) if self.show_progress else None
        docs = tokens = 0
        started = time.monotonic()
        try:
            while True:
                kind, a, b = self.reader.recv()
                if kind == "quit":
                    return
                with self._lock:
                    if kind == "start":
                        self.running[b] = a
                    elif kind == "end":
                        self.running.pop(b, None)
                if bar is None:
                    continue
                if kind == "task":
                    bar.update(1)
                elif kind == "progress":
                    docs, tokens = docs + a, tokens + b
                    dt = max(time.monotonic() - started, 1e-6)
                    bar.set_postfix_str(f"{docs / dt:,.0f} docs/s, {tokens / dt / 1e6:,.2f}M tok/s", refresh=False)
        finally:
            if bar is not None:
                bar.close()


def _bar(n_tasks: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=n_tasks, unit="task", desc="tokenize", dynamic_ncols=True, mininterval=0.5)


def stop_workers(processes: list[Any], stop: Any, *, grace: float = 5.0) -> None:
    """Stop every worker now: no new task starts, running tasks stop at their next safe point (SIGTERM),
    and whatever is still alive after ``grace`` seconds is killed.  Returns once all have exited."""
    stop.value = 1
    for p in processes:
        if p.is_alive():
            _signal(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            log.warning("worker pid %d did not stop within %.0f s; killing it", p.pid, grace)
            p.kill()
            p.join(10)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def describe_deaths(processes: list[Any], running: dict[int, int]) -> str:
    """Which task each dead worker was running and how it died.

    Workers the pool itself stopped afterwards (SIGTERM, or a stop at a safe point, exit 75) are left
    out when another worker died differently: that one is the cause.
    """
    ended = [(p.pid, p.exitcode) for p in processes if p.exitcode not in (None, 0)]
    abrupt = [(pid, code) for pid, code in ended if code not in (EXIT_REQUEUE, -signal.SIGTERM)]
    parts = []
    for pid, code in abrupt or ended:
        task = running.get(pid)
        who = f"task {task} (worker pid {pid})" if task is not None else f"an idle worker (pid {pid})"
        parts.append(f"{who} was {describe_exit(code)}" if code < 0 else f"{who} {describe_exit(code)}")
    return "; ".join(parts) or "a worker process ended abruptly"
