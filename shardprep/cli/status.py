"""``shardprep status``: done / missing tasks (Slurm array syntax), totals, from the sidecars."""

from __future__ import annotations

import argparse
from pathlib import Path

from shardprep.errors import EXIT_INCOMPLETE
from shardprep.executor.slurm.state import slurm_status_json, slurm_status_lines
from shardprep.job.state import format_array_ranges, job_state, load_job
from shardprep.shard.format import INDEX_FILE

NAME = "status"
HELP = "show done/missing tasks, token and document totals of an output directory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", metavar="OUTPUT", help="output directory holding job.json")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")


def run(args: argparse.Namespace) -> int:
    output = Path(args.output)
    job = load_job(output)
    state = job_state(output, job)
    totals = state.totals()
    finalized = (output / INDEX_FILE).exists()
    if args.json:
        import orjson

        print(orjson.dumps({
            "output": str(output), "tasks": state.n_tasks, "done": sorted(state.done),
            "missing": state.missing, "missing_ranges": format_array_ranges(state.missing),
            "problems": {str(k): v for k, v in state.problems.items()}, "totals": totals, "finalized": finalized,
            "slurm": slurm_status_json(output, state),
        }, option=orjson.OPT_INDENT_2).decode())
    else:
        print(f"{output}: plan {job.fingerprint[:12]}, {state.n_tasks} task(s)")
        print(f"  done:     {len(state.done)}")
        print(f"  missing:  {len(state.missing)}" + (f"  [{format_array_ranges(state.missing)}]" if state.missing else ""))
        print(f"  documents {totals['documents']:,}, tokens {totals['tokens']:,}, bytes {totals['bytes']:,}, "
              f"skipped {totals['skipped']:,}")
        print(f"  index.json: {'written' if finalized else 'not yet (run shardprep finalize)'}")
        for line in slurm_status_lines(output, state):
            print(line)
    return 0 if state.complete else EXIT_INCOMPLETE
