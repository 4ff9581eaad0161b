"""The sbatch executor: render the tokenize array(s) and a finalize job, submit them, record the ids.

Flow of :meth:`SlurmExecutor.launch`:

1. read MaxArraySize (``scontrol show config``, else 1001) and split the task ids into arrays whose
   indices stay below it (``slurm_render.plan_arrays``); index i of an array runs task offset + i;
2. throttle: ``--max-parallel N`` must bound the whole submission, not each array.  A single array gets
   ``%N``.  Several arrays are *chained*: each keeps ``%N`` and waits for the previous one
   (``--dependency=afterany:<previous>``), so at most N tasks run at any time.  The cost is a short tail
   at each array boundary where fewer than N tasks run; we chose it over splitting N between the arrays,
   which strands capacity whenever one array finishes early (and cannot work when N < number of arrays);
3. the finalize job depends on every array with ``afterok`` and ``--kill-on-invalid-dep=yes``: it runs
   once all tasks succeeded, and is cancelled (not left pending forever) if one fails.  Finalize itself
   re-checks every sidecar, so a Slurm state is never taken as proof of a shard;
4. scripts go to ``OUTPUT/slurm/NNN-*.sbatch``, logs to ``OUTPUT/logs/%A_%a.out``, job ids to
   ``OUTPUT/slurm/jobs.json`` (see ``slurm_jobs``).

``--dry-run`` renders the same scripts and returns them with the sbatch command lines, submitting and
writing nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from shardprep.errors import ConfigError
from shardprep.executor.base import LaunchReport
from shardprep.executor.slurm import commands as slurm_cmd
from shardprep.executor.slurm.jobs import SLURM_DIR, SubmissionRecorder
from shardprep.executor.slurm.options import SlurmOptions
from shardprep.executor.slurm.state import refuse_if_active
from shardprep.executor.slurm.render import (TASK_LOG_PATTERN, ArrayChunk, plan_arrays, render_finalize,
                                             render_tokenize, unsafe_path_problem)
from shardprep.job.state import format_array_ranges
from shardprep.shard.format import INDEX_FILE, LOG_DIR

log = logging.getLogger(__name__)


@dataclass
class PlannedJob:
    """One sbatch invocation: a script, where it is stored, and what it waits for."""

    kind: str                      # "tokenize" or "finalize"
    script_name: str               # file name under OUTPUT/slurm
    text: str
    chunk: ArrayChunk | None = None
    after: str = ""                # "afterany" (throttle chain) or "afterok" (finalize), on earlier arrays


def throttle_mode(opts: SlurmOptions, n_arrays: int) -> str:
    if not opts.max_parallel:
        return "none"
    return "single-array" if n_arrays <= 1 else "chained"


class SlurmExecutor:
    """Submit task ids of a frozen plan as sbatch job arrays plus a dependent finalize job."""

    name = "slurm"

    def __init__(self, options: SlurmOptions, *, finalize: bool = True):
        self.options = options
        self.finalize = finalize

    def plan_jobs(self, output: Path, task_ids: list[int], max_array_size: int, seq: int) -> list[PlannedJob]:
        chunks = plan_arrays(task_ids, max_array_size)
        chained = throttle_mode(self.options, len(chunks)) == "chained"
        jobs = [
            PlannedJob("tokenize", f"{seq:03d}-tokenize-{k}.sbatch",
                       render_tokenize(self.options, output, chunk, part=k, parts=len(chunks)),
                       chunk=chunk, after="afterany" if chained and k > 0 else "")
            for k, chunk in enumerate(chunks)
        ]
        if self.finalize and (jobs or not (output / INDEX_FILE).exists()):
            jobs.append(PlannedJob("finalize", f"{seq:03d}-finalize.sbatch",
                                   render_finalize(self.options, output), after="afterok" if jobs else ""))
        return jobs

    def launch(self, output: Path, task_ids: list[int], *, dry_run: bool = False) -> LaunchReport:
        output = Path(output).resolve()
        problem = unsafe_path_problem(output)
        if problem:
            raise ConfigError(f"--output {output}: the path {problem}, which sbatch cannot take in "
                              "#SBATCH --output", hint="choose a directory path without such characters")
        refuse_if_active(output, task_ids)
        max_size, source = slurm_cmd.max_array_size()
        recorder = None if dry_run else SubmissionRecorder(output, {
            "executor": self.name, "tasks": format_array_ranges(task_ids), "max_array_size": max_size,
            "max_array_size_source": source, "throttle": None, "options": self.options.to_dict()})
        seq = recorder.seq if recorder else 1
        jobs = self.plan_jobs(output, task_ids, max_size, seq)
        n_arrays = sum(j.kind == "tokenize" for j in jobs)
        log.info("%d task(s) as %d array job(s) (MaxArraySize %d from %s), throttle: %s", len(task_ids),
                 n_arrays, max_size, source, throttle_mode(self.options, n_arrays))
        if dry_run:
            return LaunchReport(self.name, list(task_ids), scripts=self._dry_run_text(output, jobs))
        recorder.record["throttle"] = throttle_mode(self.options, n_arrays)
        (output / LOG_DIR).mkdir(parents=True, exist_ok=True)   # Slurm does not create --output's directory
        (output / SLURM_DIR).mkdir(parents=True, exist_ok=True)
        array_ids: list[str] = []
        report = LaunchReport(self.name, list(task_ids))
        for job in jobs:
            path = output / SLURM_DIR / job.script_name
            path.write_text(job.text, encoding="utf-8")
            dependency = self._dependency(job, array_ids)
            job_id = slurm_cmd.sbatch(str(path), dependency=dependency,
                                      kill_on_invalid_dep=job.kind == "finalize" and bool(dependency))
            report.job_ids.append(job_id)
            report.scripts.append(str(path))
            entry = {"job_id": job_id, "script": f"{SLURM_DIR}/{job.script_name}", "dependency": dependency}
            if job.chunk is not None:
                array_ids.append(job_id)
                entry.update(offset=job.chunk.offset, array=job.chunk.array_spec(self.options.max_parallel),
                             indices=format_array_ranges(list(job.chunk.indices)),
                             tasks=format_array_ranges(job.chunk.task_ids), log=f"{LOG_DIR}/{{job}}_{{index}}.out")
                recorder.add_array(entry)
                log.info("submitted array job %s: tasks %s (--array=%s)", job_id, entry["tasks"], entry["array"])
            else:
                entry["log"] = f"{LOG_DIR}/finalize-{job_id}.out"
                recorder.set_finalize(entry)
                log.info("submitted finalize job %s (%s)", job_id, dependency or "no dependency")
        return report

    @staticmethod
    def _dependency(job: PlannedJob, array_ids: list[str]) -> str | None:
        if job.after == "afterany" and array_ids:
            return f"afterany:{array_ids[-1]}"
        if job.after == "afterok" and array_ids:
            return "afterok:" + ":".join(array_ids)
        return None

    def _dry_run_text(self, output: Path, jobs: list[PlannedJob]) -> list[str]:
        """Each script preceded by the sbatch command that would submit it (job ids as placeholders)."""
        placeholders = [f"<job id of array {k}>" for k, j in enumerate(jobs) if j.kind == "tokenize"]
        out = []
        for k, job in enumerate(jobs):
            dependency = self._dependency(job, placeholders[:k] if job.kind == "tokenize" else placeholders)
            path = output / SLURM_DIR / job.script_name
            cmd = " ".join(slurm_cmd.sbatch_argv(str(path), dependency=dependency,
                                                 kill_on_invalid_dep=job.kind == "finalize" and bool(dependency)))
            tasks = f" (tasks {format_array_ranges(job.chunk.task_ids)})" if job.chunk else ""
            out.append(f"# ---- {job.kind}{tasks}: {cmd}\n{job.text}")
        return out


__all__ = ["SlurmExecutor", "TASK_LOG_PATTERN", "throttle_mode"]
