"""Put the report together: read the output, compute the numbers, then draw and write the page.

``report_numbers`` needs no plotting library (``--json`` works on a bare install); ``write_report``
imports matplotlib through ``figures`` only when asked for the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shardprep.report import DEFAULT_MAX_CHUNKS
from shardprep.report.collect import collect
from shardprep.report.doclens import doc_lengths
from shardprep.report.numbers import build_numbers
from shardprep.report.tokenizer import decode_samples, describe_tokenizer, sample_documents

if TYPE_CHECKING:  # pragma: no cover
    from shardprep.storage.locations import StorageOptions


def report_numbers(location: str | Path, *, max_chunks: int = DEFAULT_MAX_CHUNKS, now: float | None = None,
                   storage: StorageOptions | None = None) -> dict:
    """Every number of the report for ``location`` (a local output directory or a finalized remote one,
    reached with ``storage``)."""
    out = collect(location, storage=storage)
    tokenizer = describe_tokenizer(out.tokenizer, out.tokenizer_json)
    samples = decode_samples(sample_documents(out), out.tokenizer_json)
    return build_numbers(out, doc_lengths(out, max_chunks), tokenizer, samples, now=now)


@dataclass(frozen=True)
class WrittenReport:
    html: Path
    pngs: list[Path]


def write_report(numbers: dict, html_path: str | Path) -> WrittenReport:
    """Draw the figures, write their PNGs beside ``html_path`` and the page itself (all atomically)."""
    from shardprep.report.figures import draw_figures
    from shardprep.report.html import render_page
    from shardprep.storage.atomic import atomic_writer

    html_path = Path(html_path)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(numbers)
    pngs = []
    for fig in figures:
        png = html_path.with_name(f"{html_path.stem}-{fig.name}.png")
        with atomic_writer(png) as f:
            f.write(fig.png)
        pngs.append(png)
    page = render_page(numbers, figures, png_names=[p.name for p in pngs])
    with atomic_writer(html_path) as f:
        f.write(page.encode("utf-8"))
    return WrittenReport(html_path, pngs)
