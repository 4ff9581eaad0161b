"""Compatibility shim: submitit pickles its callables by module path, so jobs queued by an older
shardprep still find ``SubmititTask``/``SubmititFinalize`` here.  The code lives in
:mod:`shardprep.executor.slurm.submitit`."""

from shardprep.executor.slurm.submitit import SubmititExecutor, SubmititFinalize, SubmititTask

__all__ = ["SubmititExecutor", "SubmititFinalize", "SubmititTask"]
