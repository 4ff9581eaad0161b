"""One Slurm submission as a pure, frozen plan: which arrays, which tasks in each, who waits for whom.

Both Slurm executors render the same :class:`SubmissionPlan` (``sbatch.py``: one script and one ``sbatch``
per array; ``submitit.py``: one ``map_array`` per array), so the rules below hold whichever submits:

1. **MaxArraySize.**  Slurm rejects array indices >= MaxArraySize, so the task ids are split into arrays
   whose indices all stay below it.  How a task gets its index depends on the executor: an sbatch array
   runs task ``offset + index`` (``indexing="offset"``: a chunk takes every id below ``offset +
   MaxArraySize``, so a sparse resume set such as ``3,1500,1502`` needs only the arrays its span needs);
   submitit's ``map_array`` numbers its arguments ``0..n-1`` (``indexing="position"``: chunks of at most
   MaxArraySize ids).
2. **One throttle for the whole submission.**  ``--max-parallel N`` must bound the submission, not each
   array.  A single array gets ``%N``.  Several arrays are *chained*: each keeps ``%N`` and waits for the
   previous one (``afterany``), so at most N tasks run at any time.  The cost is a short tail at each array
   boundary where fewer than N run; we chose it over splitting N between the arrays, which strands
   capacity whenever one array finishes early (and cannot work when N < number of arrays).
3. **Finalize after everything.**  The finalize job depends on every array with ``afterok`` and
   ``--kill-on-invalid-dep=yes``: it runs once all tasks succeeded and is cancelled (not left pending
   forever) if one fails.  Finalize re-checks every sidecar, so a Slurm state is never taken as proof of a
   shard.  With no task to run it is still submitted unless the output is already finalized.

Nothing here touches Slurm or the file system; the executors pass in MaxArraySize and whether index.json
exists, and map array numbers to the job ids they get back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from shardprep.job.state import format_array_ranges

Indexing = Literal["offset", "position"]


@dataclass(frozen=True)
class PlannedArray:
    """One array job: index ``indices[i]`` runs task ``task_ids[i]`` (both ascending)."""

    number: int                    # position in the submission, 0-based
    task_ids: tuple[int, ...]
    indices: tuple[int, ...]
    offset: int | None             # "offset" indexing: every index is task - offset; None for "position"
    after: int | None = None       # the throttle chain: start after array ``after`` ended (afterany)

    def array_spec(self, throttle: int | None = None) -> str:
        """``--array`` value, e.g. ``0-3,7%2``."""
        spec = format_array_ranges(list(self.indices))
        return f"{spec}%{throttle}" if throttle else spec


@dataclass(frozen=True)
class SubmissionPlan:
    """Arrays, their chaining and the finalize dependency of one submission; see the module docstring."""

    arrays: tuple[PlannedArray, ...]
    max_array_size: int
    throttle: int | None           # the %N shared by every array, None for no limit
    finalize: bool                 # submit a finalize job
    finalize_after: tuple[int, ...]  # array numbers the finalize job waits for (afterok): all of them

    @classmethod
    def build(cls, task_ids: Sequence[int], *, max_array_size: int, throttle: int | None = None,
              indexing: Indexing = "offset", finalize: bool = True, finalized: bool = False) -> "SubmissionPlan":
        """The plan for ``task_ids``.  ``finalize``: the caller wants index.json written afterwards;
        ``finalized``: index.json exists already (then an empty submission needs no finalize job)."""
        if indexing not in ("offset", "position"):
            raise ValueError(f"indexing {indexing!r}: offset or position")
        if max_array_size < 1:
            raise ValueError("max_array_size must be positive")
        if throttle is not None and throttle < 1:
            raise ValueError("throttle must be positive")
        ids = sorted(set(int(t) for t in task_ids))
        if ids and ids[0] < 0:
            raise ValueError("task ids must be non-negative")
        groups = _by_span(ids, max_array_size) if indexing == "offset" else _by_count(ids, max_array_size)
        chained = bool(throttle) and len(groups) > 1
        arrays = tuple(_array(k, group, indexing, after=k - 1 if chained and k > 0 else None)
                       for k, group in enumerate(groups))
        want_finalize = finalize and (bool(arrays) or not finalized)
        return cls(arrays, max_array_size, throttle or None, want_finalize,
                   tuple(a.number for a in arrays) if want_finalize else ())

    @property
    def throttle_mode(self) -> str:
        """``none``, ``single-array`` (one array with %N) or ``chained`` (recorded in jobs.json)."""
        if not self.throttle:
            return "none"
        return "single-array" if len(self.arrays) <= 1 else "chained"

    @property
    def task_ids(self) -> list[int]:
        return [t for a in self.arrays for t in a.task_ids]

    def array_dependency(self, array: PlannedArray, job_ids: Sequence[str]) -> str | None:
        """The ``--dependency`` of ``array`` given the job ids of the arrays before it (by number)."""
        return None if array.after is None else f"afterany:{job_ids[array.after]}"

    def finalize_dependency(self, job_ids: Sequence[str]) -> str | None:
        """The finalize job's ``--dependency`` given every array's job id; None when it waits for nothing
        (then it needs no ``--kill-on-invalid-dep`` either)."""
        return "afterok:" + ":".join(job_ids[k] for k in self.finalize_after) if self.finalize_after else None


def _array(number: int, group: list[int], indexing: Indexing, *, after: int | None) -> PlannedArray:
    if indexing == "offset":
        return PlannedArray(number, tuple(group), tuple(t - group[0] for t in group), group[0], after)
    return PlannedArray(number, tuple(group), tuple(range(len(group))), None, after)


def _by_span(ids: list[int], max_array_size: int) -> list[list[int]]:
    """Greedy over sorted ids: a group starts at its smallest id (the offset) and takes every id below
    ``offset + max_array_size``.  A contiguous range 0..n-1 becomes ceil(n / max) groups."""
    groups: list[list[int]] = []
    for t in ids:
        if groups and t < groups[-1][0] + max_array_size:
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


def _by_count(ids: list[int], max_array_size: int) -> list[list[int]]:
    return [ids[i:i + max_array_size] for i in range(0, len(ids), max_array_size)]
