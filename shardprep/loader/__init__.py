"""Feed shardprep shards to PyTorch (DDP): ``ShardDataset`` and ``make_dataloader`` (docs/loader.md).

The two public names are resolved lazily so that the pure modules (``order``, ``distribute``, ``index``)
can be imported, e.g. by the CLI or on a login node, without importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ShardDataset", "ShardLoader", "make_dataloader"]

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.loader.dataloader import ShardLoader, make_dataloader
    from shardprep.loader.dataset import ShardDataset


def __getattr__(name: str) -> Any:
    if name in __all__:
        from shardprep._extras import require

        require("torch", feature=f"shardprep.loader.{name}")
    if name == "ShardDataset":
        from shardprep.loader.dataset import ShardDataset
        return ShardDataset
    if name in ("ShardLoader", "make_dataloader"):
        from shardprep.loader import dataloader
        return getattr(dataloader, name)
    raise AttributeError(f"module 'shardprep.loader' has no attribute {name!r}")
