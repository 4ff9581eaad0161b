"""Slurm options of ``shardprep submit`` as one frozen, validated value.

Both Slurm executors (sbatch and submitit) and the stage job read the same :class:`SlurmOptions`, so
an option means the same thing whichever way the work is submitted.  Every value is checked when the
object is built and an error names the command-line option, the value and the expected form: a typo in
``--time`` should fail on the login node, not as a rejected job an hour later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from shardprep.errors import ConfigError
from shardprep.records import Record

DEFAULT_SIGNAL_SECONDS = 120
DEFAULT_MAX_REQUEUES = 3        # also written in templates/tokenize.sbatch for by-hand use (a test keeps both equal)
DEFAULT_JOB_NAME = "shardprep"

# sbatch options the executors set themselves; accepting them in --sbatch-extra would silently break
# task numbering, log locations, the environment or the finalize dependency.
RESERVED_SBATCH_OPTIONS = frozenset({
    "--array", "-a", "--output", "-o", "--error", "-e", "--dependency", "-d", "--export", "--parsable",
    "--wrap", "--requeue", "--no-requeue", "--signal", "--open-mode", "--kill-on-invalid-dep",
    "--job-name", "-J", "--cpus-per-task", "-c", "--partition", "-p", "--account", "-A", "--qos", "-q",
    "--time", "-t", "--mem", "--constraint", "-C", "--nodes", "-N", "--ntasks", "-n",
})

# Matched whole (``fullmatch``: ``$`` alone would let a final newline through into an #SBATCH line)
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.,:@+=/%|&!*()\[\]\-]+")   # no spaces, quotes, $, `, ;, #
_MEM = re.compile(r"[1-9][0-9]*([KMGT]B?)?", re.IGNORECASE)
_OPTION_NAME = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9_-]*")
TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


def parse_slurm_time(text: str) -> int | None:
    """Seconds in a Slurm ``--time`` value; None for ``UNLIMITED``/``INFINITE``.

    Accepts the forms sbatch accepts: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``.  Raises ValueError otherwise.
    """
    t = text.strip()
    if t.upper() in {"UNLIMITED", "INFINITE"}:
        return None
    days = 0
    if "-" in t:
        d, _, t = t.partition("-")
        if not d.isdigit():
            raise ValueError(text)
        days = int(d)
        parts = t.split(":")
        if not 1 <= len(parts) <= 3:
            raise ValueError(text)
        parts += ["0"] * (3 - len(parts))                    # D-HH[:MM[:SS]]
    else:
        parts = t.split(":")
        if len(parts) == 1:
            parts = ["0", parts[0], "0"]                     # MM
        elif len(parts) == 2:
            parts = ["0", *parts]                            # MM:SS
        elif len(parts) != 3:
            raise ValueError(text)
    if not all(p.isdigit() for p in parts):
        raise ValueError(text)
    h, m, s = (int(p) for p in parts)
    return ((days * 24 + h) * 60 + m) * 60 + s


def refuse_control_characters(option: str, value: str) -> None:
    """ConfigError naming ``option`` when ``value`` holds a newline, NUL or other control character.

    Why: every Slurm option ends up on one ``#SBATCH`` line of a bash script; a newline would end the
    line there and make the rest a shell command that the job runs (issue 31)."""
    bad = sorted({c for c in value if ord(c) < 32 or 127 <= ord(c) < 160})
    if bad:
        raise ConfigError(f"{option} {value!r}: contains {', '.join(repr(c) for c in bad)}; "
                          "an sbatch option is one line without control characters")


def normalize_extra_line(line: str) -> str:
    """One free-form sbatch option in a canonical form, or ConfigError naming ``--sbatch-extra``.

    Accepted: ``#SBATCH --gres=gpu:1``, ``--gres=gpu:1``, ``--gres gpu:1`` and ``gres=gpu:1`` (the last
    spares the ``--sbatch-extra=--x`` spelling a command-line parser needs for values that start with a dash).
    """
    refuse_control_characters("--sbatch-extra", line)
    text = line.strip()
    if text.startswith("#SBATCH"):
        text = text[len("#SBATCH"):].strip()
    if text and not text.startswith("-"):
        text = "--" + text
    name, _, value = text.partition(" ")
    value = value.strip()
    if any(c.isspace() for c in value) or not _OPTION_NAME.fullmatch(name.split("=", 1)[0]):
        raise ConfigError(f"--sbatch-extra {line!r}: give one sbatch option such as 'exclusive', "
                          "'gres=gpu:1' or '#SBATCH --gres=gpu:1'")
    if value:
        text = f"{name}={value}" if name.startswith("--") else f"{name} {value}"
    option = text.split("=", 1)[0].split(" ", 1)[0]
    if option in RESERVED_SBATCH_OPTIONS:
        raise ConfigError(f"--sbatch-extra {line!r}: {option} is set by shardprep",
                          hint="use the dedicated shardprep option instead (see `shardprep submit --help`)")
    if any(c in text for c in "`$;\"\'\\"):
        raise ConfigError(f"--sbatch-extra {line!r}: quotes and the shell characters ` $ ; \\ are not allowed")
    return text


@dataclass(frozen=True)
class SlurmOptions(Record):
    """Resources and behaviour of the tokenize array (and, where they apply, finalize and stage jobs).

    ``None`` means "not set": the option is left out of the script and the site default applies.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None                 # sbatch --time syntax
    mem: str | None = None                  # sbatch --mem syntax, e.g. 16G
    cpus_per_task: int = 1
    constraint: str | None = None
    max_parallel: int | None = None         # the %N throttle, shared by every array of one submission
    extra_sbatch: tuple[str, ...] = field(default_factory=tuple)   # free-form options, normalised
    signal_seconds: int = DEFAULT_SIGNAL_SECONDS   # USR1 this long before the time limit
    job_name: str = DEFAULT_JOB_NAME
    max_requeues: int = DEFAULT_MAX_REQUEUES       # requeues after a pre-timeout stop; then the task fails

    def __post_init__(self) -> None:
        names = (("--partition", self.partition), ("--account", self.account), ("--qos", self.qos),
                 ("--constraint", self.constraint), ("--job-name", self.job_name))
        for opt, value in (*names, ("--time", self.time), ("--mem", self.mem)):
            if isinstance(value, str):
                refuse_control_characters(opt, value)
        for opt, value in names:
            if value is not None and not _SAFE_VALUE.fullmatch(value):
                raise ConfigError(f"{opt} {value!r}: use letters, digits and _ . , : @ + = / % | & ! * ( ) [ ] -")
        if self.time is not None:
            try:
                if any(c.isspace() for c in self.time):
                    raise ValueError(self.time)
                seconds = parse_slurm_time(self.time)
            except ValueError:
                raise ConfigError(f"--time {self.time!r} is not a Slurm time; use {TIME_FORMS}") from None
            if seconds is not None and seconds <= 0:
                raise ConfigError(f"--time {self.time!r} must be longer than zero")
            if seconds is not None and self.signal_seconds >= seconds:
                raise ConfigError(
                    f"--signal-seconds {self.signal_seconds} is not shorter than --time {self.time} "
                    f"({seconds} s): the stop signal would arrive as the task starts",
                    hint="lower --signal-seconds or raise --time")
        if self.mem is not None and not _MEM.fullmatch(self.mem):
            raise ConfigError(f"--mem {self.mem!r}: use a size such as 16G, 4000M or 16000 (MB)")
        if not isinstance(self.cpus_per_task, int) or self.cpus_per_task < 1:
            raise ConfigError(f"--cpus-per-task {self.cpus_per_task!r} must be a positive integer")
        if self.max_parallel is not None and (not isinstance(self.max_parallel, int) or self.max_parallel < 1):
            raise ConfigError(f"--max-parallel {self.max_parallel!r} must be a positive integer")
        if not isinstance(self.signal_seconds, int) or not 1 <= self.signal_seconds <= 65535:
            raise ConfigError(f"--signal-seconds {self.signal_seconds!r} must be between 1 and 65535")
        if not isinstance(self.max_requeues, int) or self.max_requeues < 0:
            raise ConfigError(f"--max-requeues {self.max_requeues!r} must be zero or a positive integer")
        object.__setattr__(self, "extra_sbatch", tuple(normalize_extra_line(x) for x in self.extra_sbatch))

    @property
    def time_seconds(self) -> int | None:
        return parse_slurm_time(self.time) if self.time else None

    def resource_directives(self, *, cpus_per_task: int | None = None, mem: bool = True) -> list[str]:
        """``--option=value`` strings for the scheduling options that are set (placement, not behaviour).

        The finalize and stage jobs reuse partition/account/qos/time/constraint but pass their own CPU
        count and may leave out ``--mem``.
        """
        out = []
        for name, value in (("partition", self.partition), ("account", self.account), ("qos", self.qos),
                            ("time", self.time), ("mem", self.mem if mem else None),
                            ("constraint", self.constraint)):
            if value is not None:
                out.append(f"--{name}={value}")
        out.append(f"--cpus-per-task={cpus_per_task or self.cpus_per_task}")
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SlurmOptions":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["extra_sbatch"] = tuple(known.get("extra_sbatch") or ())
        return cls(**known)
