"""Python API for the whole job: plan into an output directory, run it, finalize.

The CLI's ``plan``/``submit`` call these, and so can a notebook or a test::

    from shardprep.api import tokenize_directory
    tokenize_directory("data/raw", "data/shards", "tokenizer.json", layout="pack")
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from shardprep.inputs.discover import discover_inputs
from shardprep.inputs.fields import require_chat_field, require_text_field
from shardprep.job.options import PlanOptions, TokenizeOptions
from shardprep.job.plan import Plan, existing_plan, recorded_storage, require_documents_possible, write_plan
from shardprep.job.schema import Job
from shardprep.job.sizing import choose_sizing
from shardprep.shard.format import JOB_FILE
from shardprep.storage.locations import StorageOptions
from shardprep.storage.lock import is_unused_dir, output_lock
from shardprep.tokenizer.load import resolve_tokenizer
from shardprep.tokenizer.plan_check import check_at_plan

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.chat.template import ChatTemplate

log = logging.getLogger(__name__)

PrepareDir = Callable[[Path], "dict[str, Any] | None"]   # see plan_job


def plan_job(inputs: Sequence[str | Path], output: str | Path, tokenizer: str | Path,
             options: TokenizeOptions | None = None, plan_options: PlanOptions | None = None, *,
             task_slots: tuple[int, str] | None = None, overwrite: bool = False,
             prepare_dir: PrepareDir | None = None, storage: StorageOptions | None = None,
             chat_template: ChatTemplate | None = None) -> tuple[Plan, Job]:
    """Discover inputs, resolve the tokenizer, split into tasks and freeze job.json in ``output``.

    ``prepare_dir(output) -> dict | None`` runs before job.json is written (Lustre striping must be set
    on the empty directory before the first file); what it returns is recorded as ``job.lustre``.
    ``task_slots`` (tasks the executor runs at once, why) feeds the default sizing rule (``job.sizing``)
    unless ``plan_options`` names a shape or ``parallel_tasks``; None: this machine's CPUs.
    ``storage``: how to reach inputs given as URLs (``s3://``, ``gs://`` ...: the S3 connection options; the
    other stores take theirs from the environment): the discovered inputs carry it to every read while
    planning, and job.json records it for the tasks.
    ``chat_template``: a chat job's template (``options.chat`` set: ``cli.plan.chat_from_args``), frozen
    beside the tokenizer.  Returns the plan and the job as written (or as already present, when identical).
    Holds the output directory's lock throughout (``storage.lock``: one writer per directory); an output
    path that is a file or cannot be written is a one-line error before any input is read.
    """
    with output_lock(output):
        return _plan_job(inputs, Path(output), tokenizer, options, plan_options, overwrite, prepare_dir, task_slots,
                         storage, chat_template)


def _plan_job(inputs: Sequence[str | Path], output: Path, tokenizer: str | Path, options: TokenizeOptions | None,
              plan_options: PlanOptions | None, overwrite: bool,
              prepare_dir: PrepareDir | None, task_slots: tuple[int, str] | None = None,
              storage: StorageOptions | None = None, chat_template: ChatTemplate | None = None) -> tuple[Plan, Job]:
    options = options or TokenizeOptions()
    plan_options = plan_options or PlanOptions()
    if (options.chat is None) != (chat_template is None):
        raise ValueError("a chat job needs its template (and only a chat job has one)")
    found = discover_inputs([str(i) for i in inputs], strict=options.strict, storage=storage)
    require_documents_possible(found)
    if options.chat is None:
        require_text_field(found, options.text_field)   # a sample of each input, before anything is written
    else:
        require_chat_field(found, options.chat.messages_field)
    resolved = resolve_tokenizer(str(tokenizer), eos_token=options.eos_token, bos_token=options.bos_token)
    if options.add_eos and resolved.info.eos_id is None:
        from shardprep.errors import TokenizerError

        raise TokenizerError(f"tokenizer {tokenizer} has no EOS token and EOS is appended by default",
                             hint="name one with --eos-token, or use --no-eos")
    if options.add_bos and resolved.info.bos_id is None:
        from shardprep.errors import TokenizerError

        raise TokenizerError(f"tokenizer {tokenizer} has no BOS token", hint="name one with --bos-token")
    previous = existing_plan(output / JOB_FILE)          # read once: the sizing to keep, the plan to compare
    sizing = choose_sizing(found, resolved, options, plan_options, task_slots,
                           previous if isinstance(previous, Job) and not overwrite else None)
    special = options.allow_special_tokens or options.chat is not None   # a chat render's markers are specials
    backend_check = check_at_plan(resolved.json, backend=options.backend, allow_special_tokens=special,
                                  fingerprint=resolved.info.fingerprint, reference=resolved.reference(special))
    plan = Plan(found, resolved, options, sizing, backend_check, recorded_storage(found, storage), chat_template)
    lustre: dict[str, Any] | None = None
    if prepare_dir is not None:
        if is_unused_dir(output):      # new: only the lock file in it
            lustre = prepare_dir(output)
    job = write_plan(output, plan, previous=previous, overwrite=overwrite, lustre=lustre)
    log.info("planned %d input(s) into %d task(s) in %s", len(found), job.n_tasks, output)
    return plan, job


def tokenize_directory(inputs: str | Path | Sequence[str | Path], output: str | Path, tokenizer: str | Path, *,
                       workers: int | None = None, overwrite: bool = False, target_task_bytes: int | None = None,
                       one_file_per_task: bool = False, show_progress: bool = False, **options: Any) -> Path:
    """Plan, run every task locally and finalize; return the output directory (holding index.json).

    Tasks are sized from the data (``job.sizing``) unless ``target_task_bytes`` or ``one_file_per_task``.
    """
    from shardprep.executor.local import LocalExecutor, LocalOptions
    from shardprep.job.state import job_state

    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    executor = LocalExecutor(LocalOptions(workers, show_progress))   # bad values fail before anything is written
    with output_lock(output):
        plan_job(inputs, output, tokenizer, TokenizeOptions(**options),
                 PlanOptions(target_task_bytes, one_file_per_task), task_slots=executor.task_slots(),
                 overwrite=overwrite)
        missing = job_state(Path(output)).missing
        executor.launch(Path(output), missing)
    return Path(output)
