"""Does a job's CPU request fit on one node of its partition?

Why: sbatch accepts ``--cpus-per-task 4`` on a partition whose nodes have 2 CPUs, and the job then sits
in ``PENDING (PartitionConfig)`` for ever, with no word from Slurm or from us (issue 23: ``stage --submit``
asked for its default of 4 CPUs on a 2-CPU partition).  ``sinfo -N`` knows each node's CPUs, so the request
is checked before anything is submitted: a value the user chose (or a recorded submission's, on resume)
that no node can give is refused naming the largest node; a default of ours is lowered to fit, with a
warning.  When sinfo cannot say, nothing is checked (the request goes as it is).
"""

from __future__ import annotations

import dataclasses
import logging

from shardprep.errors import ConfigError
from shardprep.executor.slurm import commands as slurm_cmd
from shardprep.executor.slurm.options import SlurmOptions

log = logging.getLogger(__name__)


def fit_cpus_to_nodes(opts: SlurmOptions, *, chosen: bool, what: str) -> SlurmOptions:
    """``opts`` with a ``cpus_per_task`` that one node of the partition can give.

    ``chosen``: the value was typed (or recorded) rather than our default, so it is refused, not changed.
    ``what`` names the job in messages ("the stage job", "each array task").
    """
    found = slurm_cmd.largest_node_cpus(opts.partition)
    if found is None or opts.cpus_per_task <= found[0]:
        return opts
    cpus, partition = found
    if chosen:
        raise ConfigError(f"--cpus-per-task {opts.cpus_per_task}: no node of partition {partition} has more than "
                          f"{cpus} CPU(s), so {what} would stay pending for ever (PartitionConfig)",
                          hint=f"use --cpus-per-task {cpus} or less, or another --partition")
    log.warning("%s gets %d CPU(s) instead of its default %d: the largest node of partition %s has %d", what, cpus,
                opts.cpus_per_task, partition, cpus)
    return dataclasses.replace(opts, cpus_per_task=cpus)
