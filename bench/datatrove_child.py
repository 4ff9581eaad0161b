"""Run datatrove's DocumentTokenizer on one JSONL file and print one JSON line of measurements.

Runs under the separate bench venv (bench/setup_datatrove.sh), so it imports nothing from shardprep.
Settings chosen to do the same work as a shardprep task: one task, one worker, the same tokenizer.json,
EOS appended, no document shuffling (shardprep does not shuffle at tokenize time either).
Usage: <venv>/bin/python bench/datatrove_child.py CORPUS.jsonl TOKENIZER.json OUTPUT_DIR
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def main() -> None:
    corpus, tokenizer, output = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    executor = LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(corpus.parent), glob_pattern=corpus.name, text_key="text"),
            DocumentTokenizer(str(output / "tokens"), tokenizer_name_or_path=tokenizer,
                              eos_token="<|endoftext|>", shuffle_documents=False),
        ],
        tasks=1, workers=1, logging_dir=str(output / "logs"), skip_completed=False,
    )
    cpu0, wall0 = time.process_time(), time.perf_counter()
    executor.run()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    token_files = [p for p in (output / "tokens").rglob("*.ds")]
    payload = sum(p.stat().st_size for p in token_files)
    total = sum(p.stat().st_size for p in (output / "tokens").rglob("*") if p.is_file())
    from importlib.metadata import version

    print(json.dumps({
        "tokens": payload // 2,  # uint16 ids for vocabularies under 65,536 (GPT-2)
        "cpu_s": cpu, "wall_s": wall, "output_bytes": total, "payload_bytes": payload,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "version": version("datatrove"),
    }))


if __name__ == "__main__":
    main()
