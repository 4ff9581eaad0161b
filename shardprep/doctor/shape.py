"""What ``doctor`` says about the job's shape: the task sizing ``submit`` would choose, and txt inputs that
look like paragraphs under ``--txt-mode line``.

Why the sizing is computed here with ``job/sizing.py``'s own ``choose_sizing`` and the executor's
``task_slots()``: doctor used to size with this machine's CPUs and no sampled shard ratio, so for the same
inputs it printed another task size than ``submit --executor slurm`` planned (issue 31, 15d).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.inputs.discover import InputFile
    from shardprep.job.sizing import Sizing

PARAGRAPH_FILES = 8           # txt inputs whose head is looked at
MIN_BLOCKS = 3                # blank-line-separated blocks a head must have to say anything
MAX_LINES_PER_BLOCK = 10      # a block longer than this on average is a file with a few blank lines


def submit_sizing(found: Sequence[InputFile], resolved: Any, text_field: str, txt_mode: str,
                  task_slots: tuple[int, str] | None, output: Path) -> tuple[Sizing, int]:
    """(the sizing ``submit`` would choose for ``found`` into ``output``, its task count).

    ``resolved``: the tokenizer (None when it could not be loaded: the rule without a sampled shard ratio);
    ``task_slots``: the executor's (None: this machine's CPUs, as ``submit`` without an executor).  A plan
    already in ``output`` keeps its sizing, as ``submit`` keeps it.
    """
    from shardprep.job.options import PlanOptions, TokenizeOptions
    from shardprep.job.plan import existing_plan
    from shardprep.job.resources import usable_cpus
    from shardprep.job.schema import Job
    from shardprep.job.sizing import auto_sizing, balanced_tasks, choose_sizing
    from shardprep.shard.format import JOB_FILE

    if resolved is None:
        slots, why = task_slots or (usable_cpus(), "this machine's CPUs")
        sizing = auto_sizing(found, slots, why, None)
    else:
        previous = existing_plan(output / JOB_FILE)
        sizing = choose_sizing(found, resolved, TokenizeOptions(text_field=text_field, txt_mode=txt_mode),
                               PlanOptions(), task_slots, previous if isinstance(previous, Job) else None)
    return sizing, balanced_tasks(sizing, sum(i.size for i in found)) or len(found)


def looks_like_paragraphs(lines: Sequence[bytes]) -> bool:
    """Whether the head ``lines`` of a txt input are blank-line-separated blocks of several lines each:
    documents that ``--txt-mode line`` would cut into one document per line."""
    blocks: list[int] = []
    run = 0
    for line in lines:
        if line.strip():
            run += 1
        elif run:
            blocks.append(run)
            run = 0
    blocks += [run] if run else []
    return (len(blocks) >= MIN_BLOCKS and statistics.median(blocks) >= 2
            and sum(blocks) / len(blocks) <= MAX_LINES_PER_BLOCK)


def paragraph_inputs(found: Sequence[InputFile], txt_mode: str) -> list[str]:
    """The first txt inputs whose head looks like paragraphs, when the documents are cut per line."""
    from shardprep.inputs.fields import head_lines

    if txt_mode != "line":
        return []
    txt = [i for i in found if i.format == "txt" and i.size][:PARAGRAPH_FILES]
    return [i.path for i in txt if looks_like_paragraphs(list(head_lines(i)))]
