"""The sbatch executor: render the :class:`SubmissionPlan` as scripts, submit them, record the job ids.

Flow of :meth:`SlurmExecutor.launch`:

1. read MaxArraySize (``scontrol show config``, else 1001) and plan the submission
   (``submission.SubmissionPlan``, ``indexing="offset"``: index i of an array runs task offset + i): the
   arrays, the shared ``--max-parallel`` throttle chained with ``afterany``, and a finalize job with
   ``afterok`` on every array and ``--kill-on-invalid-dep=yes``;
2. render one script per array and one for finalize (``render.py``);
3. submit them in order, turning the plan's array numbers into the job ids sbatch returned: scripts go to
   ``OUTPUT/slurm/NNN-*.sbatch``, logs to ``OUTPUT/logs/%A_%a.out``, job ids to ``OUTPUT/slurm/jobs.json``
   (see ``jobs.py``).

``--dry-run`` renders the same scripts and returns them with the sbatch command lines (job ids as
placeholders), submitting and writing nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from shardprep.executor.base import LaunchReport
from shardprep.executor.slurm import commands as slurm_cmd
from shardprep.executor.slurm.jobs import SLURM_DIR, ArrayRecord, FinalizeRecord, SubmissionRecorder
from shardprep.executor.slurm.launch import SlurmLauncher
from shardprep.executor.slurm.render import (
    TASK_LOG_PATTERN,
    input_store_environment,
    render_finalize,
    render_tokenize,
)
from shardprep.executor.slurm.submission import PlannedArray, SubmissionPlan
from shardprep.job.state import format_array_ranges
from shardprep.shard.format import LOG_DIR
from shardprep.storage.atomic import atomic_writer
from shardprep.storage.nofollow import real_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RenderedJob:
    """One sbatch invocation: its script, where it is stored, and the planned array it runs (None: finalize)."""

    script_name: str               # file name under OUTPUT/slurm
    text: str
    array: PlannedArray | None = None

    @property
    def kind(self) -> str:
        return "finalize" if self.array is None else "tokenize"


class SlurmExecutor(SlurmLauncher):
    """Submit task ids of a frozen plan as sbatch job arrays plus a dependent finalize job."""

    name = "slurm"
    indexing = "offset"

    def render(self, output: Path, plan: SubmissionPlan, seq: int) -> list[RenderedJob]:
        """The scripts of ``plan``, arrays first (in plan order), then finalize."""
        store_env = input_store_environment(output)          # (job.json read, and any warning said, once)
        jobs = [RenderedJob(f"{seq:03d}-tokenize-{a.number}.sbatch",
                            render_tokenize(self.options, output, a, parts=len(plan.arrays), store_env=store_env), a)
                for a in plan.arrays]
        if plan.finalize:
            jobs.append(RenderedJob(f"{seq:03d}-finalize.sbatch", render_finalize(self.options, output)))
        return jobs

    def launch(self, output: Path, task_ids: list[int], *, dry_run: bool = False) -> LaunchReport:
        launch = self.prepare(output, task_ids)
        output, plan = launch.output, launch.plan
        log.info("%d task(s) as %d array job(s) (MaxArraySize %d from %s), throttle: %s", len(task_ids),
                 len(plan.arrays), plan.max_array_size, launch.max_array_size_source, plan.throttle_mode)
        if dry_run:
            return LaunchReport(self.name, list(task_ids), scripts=self._dry_run_text(output, plan))
        recorder = self.recorder(launch)
        real_dir(output / LOG_DIR)       # Slurm does not create --output's directory; a planted link: refused
        real_dir(output / SLURM_DIR)
        report = LaunchReport(self.name, list(task_ids))
        array_ids: list[str] = []                                # job id of array k at position k
        for job in self.render(output, plan, recorder.seq):
            path = output / SLURM_DIR / job.script_name
            with atomic_writer(path) as f:       # replaces a link planted at its name, never writes through it
                f.write(job.text.encode("utf-8"))
            dependency = self._dependency(plan, job, array_ids)
            job_id = slurm_cmd.sbatch(str(path), dependency=dependency,
                                      kill_on_invalid_dep=job.array is None and bool(dependency))
            report.job_ids.append(job_id)
            report.scripts.append(str(path))
            self._record(recorder, job, job_id, dependency)
            if job.array is not None:
                array_ids.append(job_id)
        return report

    @staticmethod
    def _dependency(plan: SubmissionPlan, job: RenderedJob, array_ids: list[str]) -> str | None:
        if job.array is None:
            return plan.finalize_dependency(array_ids)
        return plan.array_dependency(job.array, array_ids)

    def _record(self, recorder: SubmissionRecorder, job: RenderedJob, job_id: str, dependency: str | None) -> None:
        script = f"{SLURM_DIR}/{job.script_name}"
        a = job.array
        if a is None:
            recorder.set_finalize(FinalizeRecord(job_id, log=f"{LOG_DIR}/finalize-{job_id}.out", script=script,
                                                 dependency=dependency))
            log.info("submitted finalize job %s (%s)", job_id, dependency or "no dependency")
            return
        entry = ArrayRecord(job_id, format_array_ranges(a.indices), format_array_ranges(a.task_ids),
                            log=f"{LOG_DIR}/{{job}}_{{index}}.out", offset=a.offset,
                            array=a.array_spec(self.options.max_parallel), script=script, dependency=dependency)
        recorder.add_array(entry)
        log.info("submitted array job %s: tasks %s (--array=%s)", job_id, entry.tasks, entry.array)

    def _dry_run_text(self, output: Path, plan: SubmissionPlan) -> list[str]:
        """Each script preceded by the sbatch command that would submit it (job ids as placeholders)."""
        placeholders = [f"<job id of array {a.number}>" for a in plan.arrays]
        out = []
        for job in self.render(output, plan, 1):
            dependency = self._dependency(plan, job, placeholders)
            path = output / SLURM_DIR / job.script_name
            cmd = " ".join(slurm_cmd.sbatch_argv(str(path), dependency=dependency,
                                                 kill_on_invalid_dep=job.array is None and bool(dependency)))
            tasks = f" (tasks {format_array_ranges(list(job.array.task_ids))})" if job.array else ""
            out.append(f"# ---- {job.kind}{tasks}: {cmd}\n{job.text}")
        return out


__all__ = ["RenderedJob", "SlurmExecutor", "TASK_LOG_PATTERN"]
