"""The truth about a job is the files in its output directory: job.json plus one sidecar per finished
task.  Status, resume, finalize and the Slurm view all read it from here (never from sacct)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from shardprep.errors import ConfigError, IncompleteError
from shardprep.shard.format import JOB_FILE, shard_name, sidecar_name

log = logging.getLogger(__name__)


def load_job(output: Path) -> dict:
    """Read ``<output>/job.json``; a clear error when there is none (nothing planned there)."""
    path = Path(output) / JOB_FILE
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise IncompleteError(f"{output} holds no {JOB_FILE}", hint="run `shardprep plan` or `submit` first") from None
    except NotADirectoryError:
        raise ConfigError(f"output directory {output} is a file, not a directory") from None
    except orjson.JSONDecodeError as e:
        raise IncompleteError(f"{path} is not valid JSON ({e})") from None


def read_sidecar(output: Path, task: int) -> dict | None:
    try:
        return orjson.loads((Path(output) / sidecar_name(task)).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None


def sidecar_problem(output: Path, job: dict, task: int, sidecar: dict | None) -> str | None:
    """Why task ``task`` does not count as done (None when it does)."""
    if sidecar is None:
        return "no sidecar"
    if sidecar.get("plan_fingerprint") != job["fingerprint"]:
        return "sidecar belongs to another plan"
    try:
        size = (Path(output) / shard_name(task)).stat().st_size
    except FileNotFoundError:
        return "shard file missing"
    if size != sidecar.get("bytes"):
        return f"shard size {size} != sidecar's {sidecar.get('bytes')}"
    return None


@dataclass
class JobState:
    n_tasks: int
    done: dict[int, dict] = field(default_factory=dict)      # task -> sidecar
    problems: dict[int, str] = field(default_factory=dict)   # task -> why not done

    @property
    def missing(self) -> list[int]:
        return sorted(self.problems)

    @property
    def complete(self) -> bool:
        return not self.problems

    def totals(self) -> dict[str, int]:
        keys = ("documents", "tokens", "bytes", "samples")
        out = {k: sum(int(s.get(k, 0)) for s in self.done.values()) for k in keys}
        out["skipped"] = sum(sum(s.get("skipped", {}).values()) for s in self.done.values())
        return out


def job_state(output: Path, job: dict | None = None) -> JobState:
    job = job if job is not None else load_job(output)
    state = JobState(len(job["tasks"]))
    for t in range(state.n_tasks):
        sc = read_sidecar(output, t)
        problem = sidecar_problem(output, job, t, sc)
        if problem is None:
            state.done[t] = sc  # type: ignore[assignment]
        else:
            state.problems[t] = problem
    return state


def format_array_ranges(ids: list[int] | set[int]) -> str:
    """``[3, 7, 8, 9]`` -> ``"3,7-9"`` (Slurm ``--array`` syntax)."""
    out: list[str] = []
    items = sorted(set(ids))
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def parse_array_ranges(text: str) -> list[int]:
    """Inverse of :func:`format_array_ranges` (accepts ``%N`` suffix and ``a-b:step``)."""
    text = text.split("%", 1)[0].strip()
    ids: set[int] = set()
    try:
        for part in filter(None, text.split(",")):
            rng, _, step = part.partition(":")
            a, _, b = rng.partition("-")
            ids.update(range(int(a), int(b or a) + 1, int(step or 1)))
    except ValueError:
        raise ConfigError(f"invalid task id list {text!r}: use Slurm array syntax such as 0,3,7-9") from None
    return sorted(ids)
