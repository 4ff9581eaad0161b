"""``StageOptions``: everything a stage needs, and the command line that reproduces it (for the stage job).

Its own module so the planner (``plan.py``) and the engine (``stage.py``) both import it without
importing each other.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from shardprep.errors import ConfigError
from shardprep.staging import s5cmd
from shardprep.storage.lustre import STAGED_INPUT_LAYOUT, StripeLayout
from shardprep.storage.s3.client import DEFAULT_PART_SIZE, ClientOptions, check_transfer_settings

DEFAULT_CONCURRENCY = 32


@dataclass(frozen=True)
class StageOptions:
    """Everything a stage needs; :meth:`to_argv` turns it back into a command line (for sbatch scripts)."""

    source: str
    dest: Path
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    concurrency: int = DEFAULT_CONCURRENCY
    multipart_threshold: int = DEFAULT_PART_SIZE
    multipart_chunksize: int = DEFAULT_PART_SIZE
    download_attempts: int = 5
    layout: StripeLayout | None = STAGED_INPUT_LAYOUT
    progress: bool | None = None
    client: ClientOptions = field(default_factory=ClientOptions)
    engine: str = "builtin"  # who fetches the large objects: our ranged GETs (builtin) or s5cmd

    def __post_init__(self) -> None:
        check_transfer_settings(self.concurrency, self.multipart_chunksize)
        if self.engine not in s5cmd.ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(s5cmd.ENGINES)} (got {self.engine!r})")
        object.__setattr__(self, "dest", Path(self.dest))

    def to_argv(self) -> list[str]:
        """``["stage", SOURCE, DEST, ...]`` reproducing these options; never contains credentials."""
        argv = ["stage", self.source, str(self.dest), "--concurrency", str(self.concurrency),
                "--part-size", str(self.multipart_chunksize), "--max-attempts", str(self.client.max_attempts)]
        for pat in self.include:
            argv += ["--include", pat]
        for pat in self.exclude:
            argv += ["--exclude", pat]
        for opt, value in (("--endpoint-url", self.client.endpoint_url), ("--profile", self.client.profile),
                           ("--region", self.client.region)):
            if value:
                argv += [opt, value]
        default = type(self.client)()
        for opt, name in (("--connect-timeout", "connect_timeout"), ("--read-timeout", "read_timeout")):
            if getattr(self.client, name) != getattr(default, name):
                argv += [opt, str(getattr(self.client, name))]
        if self.engine != "builtin":
            argv += ["--engine", self.engine]
        if self.layout is None:
            argv.append("--no-stripe")
        elif self.layout != STAGED_INPUT_LAYOUT:
            argv.append("--stripe-layout=" + shlex.join(self.layout.args))
        return argv
