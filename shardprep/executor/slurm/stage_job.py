"""``shardprep stage SRC DEST --submit [--then-tokenize SUBMIT_ARGS...]``: staging as a Slurm job.

The stage job runs ``shardprep stage`` with exactly the options given on the login node
(``StageOptions.to_argv``, which never contains credentials).  With ``--then-tokenize`` the same job,
once every object is staged and verified, runs ``shardprep submit --executor slurm --input DEST
SUBMIT_ARGS...``, which plans DEST and submits the tokenize array and its finalize job.  The tokenize
array cannot be submitted up front with ``--dependency=afterok:<stage>``: its task count comes from the
plan, and the plan needs the staged files.  Submitting it from the stage job gives the same guarantee
(nothing is tokenized unless the stage succeeded) and the compute node needs only ``sbatch``, which
Slurm clusters provide there.

Where things go: Lustre striping is applied to DEST *now*, while it is new and empty (the job would find
it non-empty); the job's script, log and ``jobs.json`` live in ``DEST/.shardprep-stage/slurm/``, a hidden
directory that input discovery skips.

Credentials: the job gets ``--export=NONE`` and only non-secret settings (``credentials.store_environment``:
profile name, region, config/credentials file paths, endpoint).  Keys in environment variables are never
written into the script; the job authenticates through ``~/.aws`` or the node's instance role.
"""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from shardprep.errors import ConfigError
from shardprep.executor.slurm import commands as slurm_cmd
from shardprep.executor.slurm.credentials import store_environment
from shardprep.executor.slurm.jobs import Submission, now_iso, read_submissions, write_submissions
from shardprep.executor.slurm.options import SlurmOptions
from shardprep.executor.slurm.render import job_environment, render, template_text, unsafe_path_problem
from shardprep.storage.atomic import atomic_writer
from shardprep.storage.nofollow import real_dir

if TYPE_CHECKING:
    from shardprep.staging.options import StageOptions

log = logging.getLogger(__name__)

STAGE_SLURM_DIR = ".shardprep-stage"          # the staging state directory (see staging.manifest)
# The stage job's defaults differ from the tokenize array's in one place: it hashes and runs TLS for
# dozens of concurrent transfers, so it asks for 4 CPUs rather than 1.
STAGE_JOB_OPTIONS = SlurmOptions(cpus_per_task=4)


def render_stage(stage_argv: Sequence[str], submit_argv: Sequence[str] | None, opts: SlurmOptions,
                 log_dir: Path, *, environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    directives = [f"--job-name={opts.job_name}-stage", f"--output={log_dir / 'stage-%j.out'}", "--export=NONE",
                  *opts.resource_directives(), *opts.extra_sbatch]
    extra = {"SHARDPREP_STAGE_ARGS": shlex.join(stage_argv), **store_environment(environ)}
    if submit_argv:
        extra["SHARDPREP_THEN_SUBMIT_ARGS"] = shlex.join(submit_argv)
    return render(template_text("stage"), directives, job_environment(extra, environ=environ))


def submit_stage(stage_options: "StageOptions", opts: SlurmOptions, submit_argv: Sequence[str] | None = None,
                 *, dry_run: bool = False, environ: Mapping[str, str] | None = None) -> str:
    """Submit the stage job for ``stage_options``; returns its job id (its record is kept in ``jobs.json``),
    or with ``dry_run`` the script it would submit.

    ``opts`` places the stage job (start from :data:`STAGE_JOB_OPTIONS`).  ``submit_argv``: the full
    ``shardprep submit`` argument list the job runs once everything is staged (None: stage only); the
    caller has checked it (``shardprep.cli.stage.check_then_tokenize``) so mistakes fail on the login
    node, not in the job.
    """
    from shardprep.storage.lustre import prepare_output_dir

    dest = Path(stage_options.dest).resolve()
    problem = unsafe_path_problem(dest)
    if problem:
        raise ConfigError(f"DEST {dest}: the path {problem}, which sbatch cannot take in #SBATCH --output")
    submit_argv = list(submit_argv) if submit_argv else None
    stage_argv = [a if a != str(stage_options.dest) else str(dest) for a in stage_options.to_argv()[1:]]
    state = dest / STAGE_SLURM_DIR
    text = render_stage(stage_argv, submit_argv, opts, state / "slurm", environ=environ)
    if dry_run:
        return text
    prepare_output_dir(dest, stage_options.layout)          # stripe DEST while it is still empty
    real_dir(state)                                         # never through a planted link (storage/nofollow.py)
    real_dir(state / "slurm")
    seq = len(read_submissions(state)) + 1
    script = state / "slurm" / f"{seq:03d}-stage.sbatch"
    with atomic_writer(script) as f:
        f.write(text.encode("utf-8"))
    job_id = slurm_cmd.sbatch(str(script))
    record = Submission(seq=seq, submitted_at=now_iso(), executor="slurm-stage", job_id=job_id, script=str(script),
                        log=str(state / "slurm" / f"stage-{job_id}.out"),
                        then_submit=tuple(submit_argv) if submit_argv else None, options=opts.to_dict())
    write_submissions(state, [*read_submissions(state), record])
    log.info("submitted stage job %s (log %s)%s", job_id, record.log,
             "; it submits the tokenize array when staging succeeded" if submit_argv else "")
    return job_id

