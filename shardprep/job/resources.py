"""What this process may really use: CPUs (Slurm allocation / affinity, not ``os.cpu_count()``) and
peak memory; and how a child process ended, in words.  One place, so the task, the local executor and
``doctor`` agree."""

from __future__ import annotations

import os
import resource
import signal
import sys
from typing import MutableMapping


def usable_cpus() -> int:
    """CPUs this process may run on: affinity mask, capped by ``SLURM_CPUS_PER_TASK`` when set.

    ``os.cpu_count()`` reports the whole node, which oversubscribes a Slurm task that was given 8 of 96
    cores (every tokenizer thread then fights for the same 8).
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    slurm = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm and slurm.isdigit() and int(slurm) > 0:
        n = min(n, int(slurm))
    return max(1, n)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process's own address space.

    Why not ``ru_maxrss`` first: Linux carries it across ``exec``, so a task started by a large process (a
    Python launcher holding a corpus, a benchmark driver) reported the launcher's size instead of its own.
    ``VmHWM`` in /proc/self/status belongs to the address space the task built.  ``ru_maxrss`` (KiB on
    Linux, bytes on macOS) where /proc is absent.
    """
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


NUMPY_THREADS_ENV = "OPENBLAS_NUM_THREADS"


def no_blas_threads(environ: MutableMapping[str, str] = os.environ) -> None:
    """Ask numpy's OpenBLAS for no threads of its own, unless the user set a number.

    Why: importing numpy starts an OpenBLAS thread for every further CPU the process may use, and those
    threads spin before they sleep: ~0.1-0.2 CPU s of a 2-CPU task here (docs/benchmarks.md, issue 20),
    more with every core of a bigger node, in every task.  shardprep does no linear algebra.  Effective
    only before numpy is imported: the CLI calls it first thing, rendered jobs export it.
    """
    environ.setdefault(NUMPY_THREADS_ENV, "1")


def set_tokenizer_threads(n: int) -> None:
    """Pin the Rust tokenizer thread pools to ``n`` threads before first use (rayon reads it once)."""
    os.environ["RAYON_NUM_THREADS"] = str(max(1, n))
    os.environ["RAYON_RS_NUM_CPUS"] = str(max(1, n))
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if n > 1 else "false"


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3      # <malloc.h>


def keep_freed_memory() -> bool:
    """Ask glibc to reuse freed blocks of up to 32 MiB instead of returning them to the kernel.

    Why: a task allocates and frees a few 8 MiB buffers per block (the block read, its documents, the
    ids).  By default glibc hands each such buffer back to the kernel and maps it afresh next time, and
    every fresh page is a page fault: on the VMs measured that cost ~3 ms per MB, as much as reading the
    block itself (docs/benchmarks.md, issue 20).  Kept in the heap, the same pages serve every block; the
    peak RSS is the task's working set either way.  False where this is not glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30))
    except (OSError, AttributeError):
        return False


def describe_exit(exitcode: int | None) -> str:
    """How a process ended, for a message: 'killed by SIGKILL', 'exited with code 3', 'still running'."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


_PR_SET_PDEATHSIG = 1        # <linux/prctl.h>


def die_with_parent(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies (``PR_SET_PDEATHSIG``); False where
    that is not available.  The local pool's fork server asks for SIGKILL, its workers for SIGTERM (they stop
    at a safe point), a task's encoding workers for SIGKILL."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
