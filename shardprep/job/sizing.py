"""How big a task (and so a shard) is: the default rule that sizes tasks from the data.

One input file per task is right when files are large and wrong when they are small: 3,000 files of
45 KB become 3,000 array tasks that each pay a fixed start-up, and 3,000 shards of 24 KB that every
loader and object store pays for again (shards under ~16 MiB are a known anti-pattern for streaming
loaders).  So unless the user names a shape, the planner picks a target number of input bytes per task:

    tasks = task slots x ceil(total / slots / 512 MiB)   (or total / floor, when under the floor per slot)
    target = total / tasks

- *task slots*: how many tasks the executor can run at once (the local workers, the Slurm partition's
  CPUs / ``--cpus-per-task``, or ``--parallel-tasks``).  Dividing by them keeps every CPU busy without
  making more tasks than that.  Above 512 MiB per slot the job runs in *full waves*: a whole multiple of
  the slots, each task at most 512 MiB, which bounds what a failed or preempted task loses without
  leaving most CPUs idle in a last, partial wave.
- *floor*: a task must make a shard of at least 16 MiB.  No task is under half the target
  (``job.cutting``), so the floor is ``2 x 16 MiB x 1.25 / r`` where ``r`` is shard bytes per
  input byte measured on a sample of the inputs (``job.shard_ratio``), and never below 64 MiB (a task
  should tokenize for seconds, not pay its start-up for nothing).  Without a sample (only compressed or
  columnar inputs, whose sizes understate the text) the floor is 128 MiB.

The planner then cuts that many tasks of equal bytes, splitting files and packing small ones in input
order (``job.cutting.iter_balanced``); an explicit ``--target-task-bytes`` packs and splits by the size
instead (``job.cutting.iter_tasks``).
``--target-task-bytes`` and ``--one-file-per-task`` override the rule.  A plan already in the output
directory keeps its sizing when the same job is planned again (a resubmission after a node went down
must not change the task assignment because the cluster has fewer CPUs now).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from shardprep.inputs.discover import InputFile
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.schema.sizing import Sizing
from shardprep.units import human_bytes

if TYPE_CHECKING:
    from shardprep.job.schema import Job
    from shardprep.tokenizer.load import ResolvedTokenizer

MIB = 1 << 20
MIN_SHARD_BYTES = 16 * MIB          # no shard smaller than this unless the whole dataset is smaller
MAX_TARGET = 512 * MIB              # at most this much input per task (more tasks than slots beyond it)
MIN_TARGET = 64 * MIB               # at least this much input per task when the shard ratio is known
UNKNOWN_RATIO_FLOOR = 128 * MIB     # the floor when it is not (compressed / columnar inputs only)
PIECE_FRACTION = 2                  # packs and split pieces are at least target / PIECE_FRACTION
MARGIN = 1.25                       # headroom on the sampled ratio


def floor_bytes(shard_ratio: float | None) -> int:
    """The smallest default target whose smallest task still makes a shard of ``MIN_SHARD_BYTES``."""
    if not shard_ratio:
        return UNKNOWN_RATIO_FLOOR
    needed = PIECE_FRACTION * MIN_SHARD_BYTES * MARGIN / shard_ratio
    return max(MIN_TARGET, math.ceil(needed / MIB) * MIB)


def auto_sizing(inputs: Sequence[InputFile], slots: int, slots_reason: str, shard_ratio: float | None) -> Sizing:
    """The default rule (module docstring) for ``inputs`` on ``slots`` parallel tasks."""
    total = sum(i.size for i in inputs)
    floor = floor_bytes(shard_ratio)
    slots = max(1, slots)
    per_slot = math.ceil(total / slots)
    head = f"{human_bytes(total)} in {len(inputs):,} file(s) over {slots} task slot(s) ({slots_reason})"
    ratio = (f"shards ~{shard_ratio:.2f} byte per input byte (sampled)" if shard_ratio
             else "shard size per input byte unknown (compressed or columnar inputs)")
    if total <= floor:
        target = floor
        why = f"{head}: the whole dataset is under the {human_bytes(floor)} floor ({ratio}), so one task"
    elif per_slot <= floor:
        target = math.ceil(total / max(1, total // floor))
        why = (f"{head}: {human_bytes(per_slot)} per slot is under the floor of {human_bytes(floor)} "
               f"that keeps shards >= {human_bytes(MIN_SHARD_BYTES)} ({ratio})")
    elif per_slot <= max(MAX_TARGET, floor):
        target = per_slot
        why = f"{head}: one task per slot keeps every CPU busy"
    else:
        waves = math.ceil(per_slot / max(MAX_TARGET, floor))
        target = math.ceil(total / (slots * waves))
        why = (f"{head}: {waves} full waves of {slots} tasks (at most {human_bytes(max(MAX_TARGET, floor))} "
               f"per task)")
    return Sizing("auto", target, why, slots, round(shard_ratio, 4) if shard_ratio else None)


def balanced_tasks(sizing: Sizing, total_bytes: int) -> int | None:
    """How many equal tasks the default rule cuts (``job.cutting.iter_balanced``); None for the other rules
    (their target is a size: ``iter_tasks`` packs and splits by it)."""
    if sizing.rule != "auto" or not sizing.target_task_bytes:
        return None
    return max(1, round(total_bytes / sizing.target_task_bytes))


def explicit_sizing(target_task_bytes: int | None, one_file_per_task: bool) -> Sizing | None:
    """The user's own shape, or None when the default rule decides."""
    if one_file_per_task:
        return Sizing("one-file-per-task", None, "--one-file-per-task: one input file per task")
    if target_task_bytes is not None:
        return Sizing("target", target_task_bytes, f"--target-task-bytes {human_bytes(target_task_bytes)}")
    return None


def describe(sizing: Sizing, n_tasks: int) -> str:
    """One line for ``plan``/``submit``: the shape chosen and why."""
    shape = ("one file per task" if sizing.target_task_bytes is None
             else f"target {human_bytes(sizing.target_task_bytes)} of input per task")
    return f"sizing: {shape} -> {n_tasks:,} task(s) [{sizing.rule}: {sizing.reason}]"


def choose_sizing(inputs: Sequence[InputFile], tokenizer: ResolvedTokenizer, options: TokenizeOptions,
                  plan_options: PlanOptions, slots: tuple[int, str] | None, previous: Job | None) -> Sizing:
    """The sizing of a new plan: the user's shape; else the auto sizing of ``previous`` (the plan already
    in the output directory, unless --overwrite) so a resubmission plans the same tasks; else the rule.

    ``slots``: (tasks the executor runs at once, why), used unless ``--parallel-tasks`` was given; None:
    this machine's CPUs.
    """
    import numpy as np  # here, not at the top: doctor and plan's messages import this module, numpy-free

    from shardprep.job.resources import usable_cpus
    from shardprep.job.shard_ratio import sample_shard_ratio

    explicit = explicit_sizing(plan_options.target_task_bytes, plan_options.one_file_per_task)
    if explicit is not None:
        return explicit
    if previous is not None and previous.sizing.rule == "auto" and plan_options.parallel_tasks is None:
        old = previous.sizing
        kept = "kept from the plan already in the output directory"
        return old if old.reason.startswith(kept) else replace(old, reason=f"{kept} ({old.reason})")
    if plan_options.parallel_tasks is not None:
        slots = (plan_options.parallel_tasks, "--parallel-tasks")
    n, why = slots or (usable_cpus(), "this machine's CPUs")
    ratio = sample_shard_ratio(inputs, tokenizer.reference(options.allow_special_tokens), options,
                               np.dtype(tokenizer.info.dtype).itemsize)
    return auto_sizing(inputs, n, why, ratio)
