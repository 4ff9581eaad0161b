"""Compatibility re-export: the Python API moved to :mod:`shardprep.api` (kept because user scripts
import ``shardprep.pipeline``)."""

from shardprep.api import plan_job, tokenize_directory

__all__ = ["plan_job", "tokenize_directory"]
