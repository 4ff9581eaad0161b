"""The submitit executor: the same tasks and finalize dependency as the sbatch executor, via submitit.

Each task is ``SubmititTask(output)(task_id)``, a thin callable around ``shardprep.job.task.run_task``, so
both Slurm executors run identical task code and produce identical bytes.  Both render the same
``submission.SubmissionPlan`` (here with ``indexing="position"``, as ``map_array`` numbers its
arguments): at most MaxArraySize elements per ``map_array`` call, arrays chained with ``afterany`` when
``--max-parallel`` is set (the throttle is shared, not multiplied), and a finalize job with ``afterok``
on every array and ``--kill-on-invalid-dep=yes``.

Pre-timeout: submitit sends its own signal (USR2, ``--signal-seconds`` before the limit) and, because the
callable has a ``checkpoint`` method, requeues the element; the rerun skips finished shards and redoes
only the unfinished one.  After ``--max-requeues`` such requeues submitit gives up ("timed-out too many
times"), as the sbatch template does.  submitit logs go to ``OUTPUT/slurm/submitit/<array>_<index>_0_log.out``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from shardprep._extras import require
from shardprep.errors import ConfigError, EnvironmentProblem
from shardprep.executor.base import LaunchReport
from shardprep.executor.slurm.jobs import SLURM_DIR, ArrayRecord, FinalizeRecord, SubmissionRecorder
from shardprep.executor.slurm.launch import SlurmLauncher
from shardprep.executor.slurm.options import SlurmOptions
from shardprep.executor.slurm.render import export_lines, input_store_environment, job_environment
from shardprep.executor.slurm.submission import SubmissionPlan
from shardprep.job.state import format_array_ranges
from shardprep.shard.format import INDEX_FILE
from shardprep.storage.nofollow import real_dir

log = logging.getLogger(__name__)

SUBMITIT_DIR = f"{SLURM_DIR}/submitit"
DEFAULT_TIMEOUT_MIN = 60   # submitit always writes --time; used when --time is not given
_LOG_HANDLER = "shardprep-submitit"   # the name of the handler a task adds to shardprep's logger, once


class SubmititTask:
    """Picklable callable run on the node: one task of the frozen plan.  Checkpointable for submitit."""

    def __init__(self, output: str):
        self.output = output

    def __call__(self, task_id: int) -> dict[str, Any]:
        import logging as _logging
        import sys

        from shardprep.job.task import run_task
        from shardprep.logsafe import protect

        # the task's progress and errors in submitit's log, as `run-task` prints them under sbatch
        # (on shardprep's logger only: submitit has its own handler on the root's side)
        ours = _logging.getLogger("shardprep")
        if not any(h.get_name() == _LOG_HANDLER for h in ours.handlers):
            handler = _logging.StreamHandler(sys.stderr)
            handler.setFormatter(_logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            handler.set_name(_LOG_HANDLER)
            protect([handler])            # botocore's loggers at WARNING, credentials masked (logsafe.py)
            ours.addHandler(handler)
            ours.setLevel(_logging.INFO)
        result = run_task(Path(self.output), int(task_id))
        return {"task": result.task, "skipped_existing": result.skipped_existing,
                "documents": result.documents, "tokens": result.tokens}

    def checkpoint(self, task_id: int) -> Any:
        """Called by submitit on the pre-timeout signal: requeue the same call (finished shards are kept)."""
        submitit = require("submitit", feature="requeueing a submitit task")
        return submitit.helpers.DelayedSubmission(self, task_id)


class SubmititFinalize:
    def __init__(self, output: str):
        self.output = output

    def __call__(self) -> str:
        from shardprep.job.finalize import finalize

        finalize(Path(self.output))
        return str(Path(self.output) / INDEX_FILE)


def extra_as_parameters(lines: tuple[str, ...]) -> dict[str, Any]:
    """``("--gres=gpu:1", "--exclusive")`` -> ``{"gres": "gpu:1", "exclusive": True}`` for submitit."""
    params: dict[str, Any] = {}
    for line in lines:
        if not line.startswith("--"):
            raise ConfigError(f"--sbatch-extra {line!r}: with --executor submitit use long options (--name=value)")
        body = line[2:]
        if "=" in body:
            name, value = body.split("=", 1)
            params[name] = value
        elif " " in body.strip():
            name, value = body.split(None, 1)
            params[name] = value.strip()
        else:
            params[body.strip()] = True
    return params


class SubmititExecutor(SlurmLauncher):
    """Submit task ids of a frozen plan with ``submitit.AutoExecutor.map_array``."""

    name = "submitit"
    indexing = "position"

    def __init__(self, options: SlurmOptions, *, finalize: bool = True):
        require("submitit", feature="--executor submitit")   # fail before anything is planned or written
        super().__init__(options, finalize=finalize)

    def parameters(self, output: Path) -> dict[str, Any]:
        o = self.options
        seconds = o.time_seconds
        params: dict[str, Any] = {
            "name": f"{o.job_name}-tokenize",
            "timeout_min": -(-seconds // 60) if seconds else DEFAULT_TIMEOUT_MIN,
            "nodes": 1, "tasks_per_node": 1, "cpus_per_task": o.cpus_per_task,
            "slurm_signal_delay_s": o.signal_seconds,
            "slurm_stderr_to_stdout": True,
            # A clean job environment (no credentials, no unrelated variables): only what python needs, and
            # the non-secret object-store settings of a plan with remote inputs.
            "slurm_setup": export_lines({k: v for k, v in job_environment(input_store_environment(output)).items()
                                         if k != "SHARDPREP_PYTHON"}) + ["export SLURM_EXPORT_ENV=ALL"],
        }
        for key, value in (("slurm_partition", o.partition), ("slurm_account", o.account),
                           ("slurm_qos", o.qos), ("slurm_mem", o.mem), ("slurm_constraint", o.constraint)):
            if value is not None:
                params[key] = value
        params["slurm_additional_parameters"] = {"export": "NONE", "requeue": True,
                                                 **extra_as_parameters(o.extra_sbatch)}
        return params

    def _executor(self, output: Path) -> Any:
        submitit = require("submitit", feature="--executor submitit")
        real_dir(output / SLURM_DIR)           # submitit writes into its folder: never through a planted link
        real_dir(output / SUBMITIT_DIR)
        try:
            # submitit counts the pre-timeout requeues itself and gives up after this many
            return submitit.AutoExecutor(folder=output / SUBMITIT_DIR, cluster="slurm",
                                         slurm_max_num_timeout=self.options.max_requeues)
        except RuntimeError as e:
            raise EnvironmentProblem(f"submitit cannot use Slurm here: {e}",
                                     hint="run on a Slurm login node, or use --executor local") from None

    def launch(self, output: Path, task_ids: list[int], *, dry_run: bool = False) -> LaunchReport:
        launch = self.prepare(output, task_ids)
        output, plan = launch.output, launch.plan
        params = self.parameters(output)
        if dry_run:
            return LaunchReport(self.name, list(task_ids),
                                scripts=[self._dry_run_text(plan, launch.max_array_size_source, params)])
        ex = self._executor(output)
        recorder = self.recorder(launch)
        report = LaunchReport(self.name, list(task_ids))
        array_ids: list[str] = []                                # job id of array k at position k
        task_fn = SubmititTask(str(output))
        for array in plan.arrays:
            extra = dict(params["slurm_additional_parameters"])
            dependency = plan.array_dependency(array, array_ids)
            if dependency:
                extra["dependency"] = dependency
            ex.update_parameters(**{**params, "slurm_additional_parameters": extra,
                                    "slurm_array_parallelism": plan.throttle or len(array.task_ids)})
            jobs = ex.map_array(task_fn, list(array.task_ids))
            array_ids.append(str(jobs[0].job_id).split("_", 1)[0])
            report.job_ids.append(array_ids[-1])
            self._record_array(recorder, array_ids[-1], array.task_ids, dependency)
        if plan.finalize:
            report.job_ids.append(self._submit_finalize(ex, params, plan.finalize_dependency(array_ids), output,
                                                        recorder))
        return report

    @staticmethod
    def _record_array(recorder: SubmissionRecorder, array_id: str, ids: tuple[int, ...],
                      dependency: str | None) -> None:
        plain = len(ids) == 1        # submitit submits a single call as a plain job, not an array
        recorder.add_array(ArrayRecord(array_id, format_array_ranges(range(len(ids))), format_array_ranges(ids),
                                       log=f"{SUBMITIT_DIR}/{{job}}_0_log.out" if plain
                                       else f"{SUBMITIT_DIR}/{{job}}_{{index}}_0_log.out",
                                       dependency=dependency, plain=plain))
        log.info("submitit array %s: tasks %s", array_id, format_array_ranges(ids))

    def _submit_finalize(self, ex: Any, params: dict[str, Any], dependency: str | None, output: Path,
                         recorder: SubmissionRecorder) -> str:
        extra = dict(params["slurm_additional_parameters"])
        if dependency:
            extra.update({"dependency": dependency, "kill-on-invalid-dep": "yes"})
        ex.update_parameters(**{**params, "name": f"{self.options.job_name}-finalize", "cpus_per_task": 1,
                                "slurm_additional_parameters": extra})
        job = ex.submit(SubmititFinalize(str(output)))
        recorder.set_finalize(FinalizeRecord(str(job.job_id), log=f"{SUBMITIT_DIR}/{job.job_id}_0_log.out",
                                             dependency=dependency))
        log.info("submitit finalize job %s (%s)", job.job_id, dependency or "no dependency")
        return str(job.job_id)

    def _dry_run_text(self, plan: SubmissionPlan, source: str, params: dict[str, Any]) -> str:
        lines = [f"# submitit: {len(plan.arrays)} map_array call(s) of at most {plan.max_array_size} (MaxArraySize "
                 f"from {source}), throttle {plan.throttle or 'none'}"
                 + (", chained with afterany" if plan.throttle_mode == "chained" else "")]
        lines += [f"#   array {a.number}: tasks {format_array_ranges(list(a.task_ids))}" for a in plan.arrays]
        lines += [f"#   parameters: {params}",
                  f"#   requeues after the pre-timeout signal: at most {self.options.max_requeues} (slurm_max_num_timeout)"]
        if plan.finalize:
            lines.append("#   finalize: afterok on every array, --kill-on-invalid-dep=yes")
        return "\n".join(lines)
