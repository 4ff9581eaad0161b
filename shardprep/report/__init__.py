"""``shardprep report``: what a job made, as one self-contained HTML page, PNGs and JSON (docs/report.md).

``collect`` reads the output's files (the only module that knows their JSON fields), ``logs`` parses the
per-task logs, ``doclens`` samples document lengths from the shards, ``tokenizer`` describes the frozen
tokenizer and decodes samples, ``numbers`` turns all of it into the report's numbers (what ``--json``
prints), ``figures`` draws them (matplotlib, the optional ``[report]`` extra) and ``html`` writes the page.
"""

DEFAULT_MAX_CHUNKS = 256   # chunks whose doclens the pack-layout histogram reads at most (``--max-chunks``)
