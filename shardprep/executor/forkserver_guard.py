"""Imported first by the local pool's fork server: the server dies with the process that started it.

Python's fork server outlives a parent killed with SIGKILL (seen under 3.11), keeping the parent's stdout
and stderr open and its forked workers alive: a killed ``submit`` would leave its tasks running and its
caller waiting on its output.  So, in the server only (its parent is the pool's process, named by
``POOL_PID`` in the environment it was started with), ask Linux to kill it when that parent dies; its
workers, whose own PDEATHSIG follows the server, then stop at their next safe point
(``executor.local_workers``).  Imported anywhere else it does nothing.
"""

from __future__ import annotations

import os
import signal

from shardprep.job.resources import die_with_parent

POOL_PID = "SHARDPREP_POOL_PID"


def _guard() -> None:
    if os.environ.get(POOL_PID) != str(os.getppid()) or not die_with_parent(signal.SIGKILL):
        return
    if str(os.getppid()) != os.environ.get(POOL_PID):      # the parent died before the kernel knew whom to watch
        os._exit(1)


_guard()
