"""Where this process sits: its rank and world size, and its DataLoader worker slot.

This is the only module of the loader that looks at the environment.  Everything else takes rank, world
size and worker slot as plain arguments, so the splitting rules stay pure functions that the property
tests can drive with any numbers.

Precedence (first that applies wins), so a value the user passed is never silently overridden:
1. explicit arguments (``rank=``, ``world_size=``);
2. ``torch.distributed`` when it is initialized (the truth inside a DDP job, whatever the launcher);
3. ``RANK`` / ``WORLD_SIZE`` (torchrun, most launchers);
4. ``SLURM_PROCID`` / ``SLURM_NTASKS`` (``srun`` without torchrun);
5. rank 0 of 1.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from shardprep.errors import ConfigError

log = logging.getLogger(__name__)

_ENV_PAIRS = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


@dataclass(frozen=True)
class World:
    """This process's place among the training processes, and where that came from (for log lines)."""

    rank: int
    world_size: int
    source: str = "default"

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ConfigError(f"world_size={self.world_size} (from {self.source}) is invalid: must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"rank={self.rank} (from {self.source}) is invalid: must be in [0, world_size={self.world_size})"
            )


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from None


def _detected() -> World:
    """Rank and world size from torch.distributed or the launcher's environment (no arguments)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return World(dist.get_rank(), dist.get_world_size(), "torch.distributed")
    except ImportError:  # the pure parts of the loader work without torch
        pass
    for rank_var, size_var in _ENV_PAIRS:
        rank, size = _env_int(rank_var), _env_int(size_var)
        if rank is not None and size is not None:
            return World(rank, size, f"{rank_var}/{size_var}")
        if (rank is None) != (size is None):
            log.warning("ignoring %s without %s", rank_var if rank is not None else size_var,
                        size_var if rank is not None else rank_var)
    return World(0, 1, "default")


def resolve_world(rank: int | None = None, world_size: int | None = None) -> World:
    """The process's rank and world size; explicit arguments override detection, each on its own."""
    if rank is not None and world_size is not None:
        return World(int(rank), int(world_size), "arguments")
    found = _detected()
    if rank is None and world_size is None:
        return found
    return World(
        int(rank) if rank is not None else found.rank,
        int(world_size) if world_size is not None else found.world_size,
        f"arguments + {found.source}",
    )


@dataclass(frozen=True)
class Placement:
    """The rank and world size a caller gave (``make_dataloader(rank=, world_size=)``, or the dataset's
    own keywords as its loader's default); None: detected each time the world is needed (``resolve``),
    so a process group initialized after the dataset was made still counts."""

    rank: int | None = None
    world_size: int | None = None

    def over(self, default: Placement) -> Placement:
        """This placement, each value not given taken from ``default``."""
        return Placement(self.rank if self.rank is not None else default.rank,
                         self.world_size if self.world_size is not None else default.world_size)

    def resolve(self) -> World:
        return resolve_world(self.rank, self.world_size)


def worker_slot() -> tuple[int, int]:
    """``(worker_id, num_workers)`` inside a DataLoader worker, ``(0, 1)`` in the main process."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1
    info = get_worker_info()
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)
