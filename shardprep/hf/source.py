"""Open a Hugging Face dataset for ``export-hf`` and read its columns as Arrow batches.

Three kinds of source, told apart by what ``SOURCE`` names:

* a directory written by ``save_to_disk`` (``state.json`` + ``dataset_info.json``; a ``DatasetDict``
  directory with ``--split``): opened with ``datasets.load_from_disk``, which memory-maps the Arrow
  files.  Rows are read by index range, so a resumed export starts exactly where it stopped.
* a builder name (``json``, ``parquet``, ``text``, ``csv``, ``arrow``) with ``--data-files``: the local
  files are read with ``load_dataset(..., streaming=True)``, so nothing is converted into the datasets
  cache first.
* anything else is a hub id, also streamed (needs the network, or a warm cache with ``HF_HUB_OFFLINE``).

Streams cannot seek, so a resumed export reads and drops the rows of finished files.  Batches are
``pyarrow.Table`` objects of at most ``BATCH_ROWS`` rows of the requested columns only.
"""

from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterator

from shardprep._extras import require
from shardprep.errors import ConfigError, InputDataError
from shardprep.inputs.arrow import is_saved_dataset, saved_dataset_files, saved_dataset_splits

log = logging.getLogger(__name__)

BUILDERS = ("json", "parquet", "text", "csv", "arrow")
BATCH_ROWS = 4096
_TEXT_TYPES = ("string", "large_string")


@dataclass
class Source:
    kind: str                     # saved | builder | hub
    description: str              # absolute directory, builder name or hub id
    split: str | None
    data_files: tuple[str, ...]   # expanded absolute paths (builder) or patterns as given (hub)
    identity: Any                 # what must not change between an export and its resumption
    dataset: Any                  # datasets.Dataset (saved) or datasets.IterableDataset
    num_rows: int | None          # known up front for saved datasets only

    def check_columns(self, text_field: str, id_field: str | None) -> list[str]:
        """The columns to read; ConfigError naming the option when one is missing or not text."""
        names = self.dataset.column_names
        features = self.dataset.features
        wanted = [text_field] + ([id_field] if id_field and id_field != text_field else [])
        if names is not None:
            for col, option in zip(wanted, ("--text-field", "--id-field")):
                if col not in names:
                    raise ConfigError(f"{option}={col!r}: {self.description} has no such column "
                                      f"(columns: {', '.join(names)})")
        if features is not None and text_field in features:
            dtype = getattr(features[text_field], "dtype", None)
            if dtype not in _TEXT_TYPES:
                raise ConfigError(f"--text-field={text_field!r}: the column holds {features[text_field]}, not text",
                                  hint="name a string column")
        return wanted

    def batches(self, columns: list[str], start: int = 0) -> Iterator[Any]:
        """``pyarrow.Table`` batches of ``columns`` from row ``start`` on, in row order."""
        if self.kind == "saved":
            table = self.dataset.select_columns(columns).with_format("arrow")
            n = len(table)
            for lo in range(start, n, BATCH_ROWS):
                yield table[lo:min(n, lo + BATCH_ROWS)]
            return
        stream = self.dataset.select_columns(columns).with_format("arrow").iter(batch_size=BATCH_ROWS)
        to_skip = start
        for batch in stream:
            if to_skip >= batch.num_rows:
                to_skip -= batch.num_rows
                continue
            if to_skip:
                batch, to_skip = batch.slice(to_skip), 0
            missing = [c for c in columns if c not in batch.column_names]
            if missing:  # streams without declared features are only checked here
                raise ConfigError(f"{self.description} has no column {missing[0]!r} "
                                  f"(columns: {', '.join(batch.column_names)}); choose one with --text-field")
            yield batch


def _file_identity(paths: list[str]) -> list[list]:
    out = []
    for p in paths:
        st = os.stat(p)
        out.append([p, st.st_size, st.st_mtime_ns])
    return out


def _expand_data_files(patterns: tuple[str, ...]) -> list[str]:
    files: list[str] = []
    for pattern in patterns:
        matches = sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True) if os.path.isfile(p))
        if not matches:
            raise InputDataError(f"--data-files {pattern!r} matches no files")
        files.extend(os.path.abspath(p) for p in matches)
    return list(dict.fromkeys(files))


def _load_error(what: str, e: Exception, hint: str) -> InputDataError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return InputDataError(f"cannot open {what}: {type(e).__name__}: {first}", hint=hint)


def _open_saved(directory: str, split: str | None, config: str | None) -> Source:
    datasets = require("datasets", feature="reading a Hugging Face dataset")

    if config:
        raise ConfigError(f"--config={config!r} applies to hub datasets; {directory} is a saved dataset")
    splits = saved_dataset_splits(directory)
    if splits is not None:
        chosen = split or ("train" if "train" in splits else None)
        if chosen not in splits:
            raise ConfigError(f"--split={split!r}: {directory} is a DatasetDict with splits {', '.join(splits)}",
                              hint="choose one with --split")
        directory, split = os.path.join(directory, chosen), chosen
    elif split:
        log.warning("--split %s ignored: %s holds a single dataset, not a DatasetDict", split, directory)
        split = None
    directory = os.path.abspath(directory)
    files = saved_dataset_files(directory)     # InputDataError for a broken state.json
    try:
        ds = datasets.load_from_disk(directory)
    except Exception as e:
        raise _load_error(directory, e, "re-save it with Dataset.save_to_disk") from None
    return Source("saved", directory, split, (), _file_identity(files), ds, len(ds))


def _open_builder(builder: str, patterns: tuple[str, ...], split: str | None, config: str | None) -> Source:
    datasets = require("datasets", feature="reading a Hugging Face dataset")

    if config:
        raise ConfigError(f"--config={config!r} applies to hub datasets, not the {builder} builder")
    files = _expand_data_files(patterns)
    split = split or "train"
    try:
        ds = datasets.load_dataset(builder, data_files=files, split=split, streaming=True)
    except Exception as e:
        raise _load_error(f"{builder} files {patterns}", e, "check the files' format matches the builder name") from None
    return Source("builder", builder, split, tuple(files), _file_identity(files), ds, None)


def _open_hub(repo: str, config: str | None, split: str | None, patterns: tuple[str, ...]) -> Source:
    datasets = require("datasets", feature="reading a Hugging Face dataset")

    split = split or "train"
    try:
        ds = datasets.load_dataset(repo, config, split=split, streaming=True, data_files=list(patterns) or None)
    except Exception as e:
        raise _load_error(f"hub dataset {repo!r}", e,
                          "check the id, --config and --split; without network set HF_HUB_OFFLINE=1 and use a "
                          "cached dataset, or export from a save_to_disk directory") from None
    identity = {"hub": repo, "config": config, "split": split, "data_files": list(patterns)}
    return Source("hub", repo, split, tuple(patterns), identity, ds, None)


def open_source(source: str, *, config: str | None = None, split: str | None = None,
                data_files: tuple[str, ...] = ()) -> Source:
    """Resolve ``SOURCE`` (see the module docstring).  Errors name the option and the next step."""
    if os.path.isdir(source) and (is_saved_dataset(source) or saved_dataset_splits(source) is not None):
        if data_files:
            raise ConfigError(f"--data-files applies to builder names and hub ids; {source} is a saved dataset")
        return _open_saved(source, split, config)
    if source in BUILDERS:
        if not data_files:
            raise ConfigError(f"the {source} builder needs --data-files GLOB (the local files to read)")
        return _open_builder(source, data_files, split, config)
    if os.path.exists(source) or source.startswith((".", "/", "~")):
        raise ConfigError(
            f"SOURCE {source} is not a dataset saved with save_to_disk (no state.json and dataset_info.json)",
            hint=f"for raw files use `export-hf json --data-files '{source}/*.jsonl'` (or parquet/text), "
                 "or tokenize them directly with `shardprep submit --input`")
    return _open_hub(source, config, split, data_files)
