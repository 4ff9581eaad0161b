"""Turn a frozen plan plus SlurmOptions into sbatch scripts and array specs (pure functions, no Slurm).

Templates live in ``shardprep/templates/*.sbatch`` (``slurm/*.sbatch`` in the repository are symlinks to
them), so a user who submits by hand runs exactly what shardprep renders.  A template is a plain bash
script driven by environment variables; rendering only fills two marker lines: the ``#SBATCH`` options
and an ``export`` block with explicit values.  Nothing from the caller's environment is copied except
the few variables listed in :data:`PASSED_ENV` (no credentials, no tokens) and, for a plan that reads
object stores, their non-secret settings (``credentials.py``); the rendered script asks for
``--export=NONE`` so the submitting shell's environment does not leak into the job either.

Which arrays a submission has, and which tasks each runs, is decided in ``submission.py``; this module
only writes the script of one planned array (index i runs task ``offset + i``) and of the finalize job.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import Mapping, Sequence

from shardprep.errors import ConfigError
from shardprep.executor.slurm.options import SlurmOptions, refuse_control_characters
from shardprep.executor.slurm.submission import PlannedArray
from shardprep.job.resources import NUMPY_THREADS_ENV, no_blas_threads

SBATCH_MARKER = "# @SHARDPREP_SBATCH@"
ENV_MARKER = "# @SHARDPREP_ENV@"
TEMPLATES = ("tokenize", "finalize", "stage", "train")
DEFAULT_MAX_ARRAY_SIZE = 1001                   # Slurm's default MaxArraySize
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TASK_LOG_PATTERN = "%A_%a.out"                  # under OUTPUT/logs; %a is the array index, not the task
# Variables copied from the submitting environment when set: what a python process needs to start,
# and the tokenizer and numpy thread knobs.  Everything else (tokens, keys, proxies, HOME-specific config)
# stays out.
PASSED_ENV = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM",
              NUMPY_THREADS_ENV)


def template_text(name: str) -> str:
    """The packaged template ``name`` (one of :data:`TEMPLATES`)."""
    if name not in TEMPLATES:
        raise ValueError(f"unknown template {name!r}")
    # one name per joinpath: Python 3.10's Traversable (zipfile.Path) takes only one
    return resources.files("shardprep").joinpath("templates").joinpath(f"{name}.sbatch").read_text(encoding="utf-8")


def export_lines(env: Mapping[str, str]) -> list[str]:
    """``export NAME='value'`` lines for ``env``: each value shell-quoted (``shlex.quote`` leaves plain paths
    as they are), each name checked, so a value is only ever that value and never a command (issue 31)."""
    bad = [k for k in env if not _ENV_NAME.fullmatch(k)]
    if bad:
        raise ConfigError(f"environment variable name {bad[0]!r} cannot be exported by a batch script")
    return [f"export {k}={shlex.quote(str(v))}" for k, v in env.items()]


def render(template: str, directives: Sequence[str], env: Mapping[str, str]) -> str:
    """Fill the marker lines of ``template``: ``#SBATCH`` lines for ``directives``, exports for ``env``.

    A directive is one line or nothing: a newline in it would make the rest a shell command of the job
    (``SlurmOptions`` refuses such values first; this is the last check before a script is written)."""
    for d in directives:
        refuse_control_characters(f"#SBATCH {d.split('=', 1)[0]}", d)
    sbatch_lines = [f"#SBATCH {d}" for d in directives]
    env_lines = export_lines(env)
    out: list[str] = []
    seen = {SBATCH_MARKER: False, ENV_MARKER: False}
    for line in template.splitlines():
        marker = next((m for m in seen if line.startswith(m)), None)
        if marker is None:
            out.append(line)
            continue
        seen[marker] = True
        out.extend(sbatch_lines if marker == SBATCH_MARKER else env_lines)
    missing = [m for m, found in seen.items() if not found]
    if missing:
        raise ValueError(f"template lacks the marker line(s) {missing}")
    return "\n".join(out) + "\n"


def job_environment(extra: Mapping[str, str] | None = None, *, environ: Mapping[str, str] | None = None,
                    python: str | None = None) -> dict[str, str]:
    """The export block of a rendered script: :data:`PASSED_ENV` when set, the interpreter, no threads for
    numpy's OpenBLAS unless asked for (``job.resources.no_blas_threads``), ``extra``."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in PASSED_ENV if environ.get(k)}
    env["SHARDPREP_PYTHON"] = python or sys.executable
    no_blas_threads(env)
    env.update(extra or {})
    return env


# --- the three job kinds -----------------------------------------------------------------------------

def tokenize_directives(opts: SlurmOptions, output: Path, array: PlannedArray, *, parts: int) -> list[str]:
    name = f"{opts.job_name}-tokenize" if parts == 1 else f"{opts.job_name}-tokenize-{array.number}"
    return [
        f"--job-name={name}",
        f"--array={array.array_spec(opts.max_parallel)}",
        f"--output={Path(output) / 'logs' / TASK_LOG_PATTERN}",
        "--export=NONE",
        *opts.resource_directives(),
        f"--signal=B:USR1@{opts.signal_seconds}",
        *opts.extra_sbatch,
    ]


def render_tokenize(opts: SlurmOptions, output: Path, array: PlannedArray, *, parts: int = 1,
                    environ: Mapping[str, str] | None = None, store_env: Mapping[str, str] | None = None) -> str:
    """The sbatch script of one tokenize array (one of ``parts`` when MaxArraySize split the ids);
    ``store_env``: :func:`input_store_environment`, when the caller renders several arrays of one plan."""
    if array.offset is None:
        raise ValueError("an sbatch array runs task offset + index: plan it with indexing='offset'")
    if store_env is None:
        store_env = input_store_environment(output, environ)
    env = job_environment({"SHARDPREP_OUTPUT": str(output), "SHARDPREP_TASK_OFFSET": str(array.offset),
                           "SHARDPREP_MAX_REQUEUES": str(opts.max_requeues), **store_env}, environ=environ)
    return render(template_text("tokenize"), tokenize_directives(opts, output, array, parts=parts), env)


def input_store_environment(output: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The object-store settings the tasks of a plan with remote inputs need (job.json ``storage``; issue 22),
    as ``stage --submit`` passes them: no keys (``credentials.store_environment``).  Empty for a plan of files."""
    from shardprep.errors import RecordError
    from shardprep.executor.slurm.credentials import store_environment
    from shardprep.job.schema import Job
    from shardprep.shard.format import JOB_FILE

    try:
        job = Job.parse((Path(output) / JOB_FILE).read_bytes(), Path(output) / JOB_FILE)
    except (OSError, RecordError):
        return {}
    return store_environment(os.environ if environ is None else environ) if job.storage is not None else {}


def render_finalize(opts: SlurmOptions, output: Path, *, environ: Mapping[str, str] | None = None) -> str:
    """The finalize job: same placement as the array, one CPU, the site's default memory."""
    directives = [
        f"--job-name={opts.job_name}-finalize",
        f"--output={Path(output) / 'logs' / 'finalize-%j.out'}",
        "--export=NONE",
        *opts.resource_directives(cpus_per_task=1, mem=False),
    ]
    env = job_environment({"SHARDPREP_OUTPUT": str(output)}, environ=environ)
    return render(template_text("finalize"), directives, env)


def checked_output(output: Path) -> Path:
    """``output`` made absolute, or ConfigError when sbatch could not take it in ``#SBATCH --output``."""
    output = Path(output).resolve()
    problem = unsafe_path_problem(output)
    if problem:
        raise ConfigError(f"--output {output}: the path {problem}, which sbatch cannot take in #SBATCH --output",
                          hint="choose a directory path without such characters")
    return output


def unsafe_path_problem(path: Path) -> str | None:
    """Why ``path`` cannot appear in an ``#SBATCH --output=`` line (sbatch does not parse quotes there)."""
    text = str(path)
    bad = sorted({c for c in text if c.isspace() or c in "\"'`$%;#\\"})
    return f"contains {' '.join(repr(c) for c in bad)}" if bad else None
