"""Messages about remote reads and parquet columns that misled (issue 31, items 12d and 12e).

12d: a web server that ignores ``Range`` (Python's own ``http.server``: an HTTP 200 with the whole file) was
reported as a truncated shard or an input "shorter than planned"; it is now named for what it is.
12e: a parquet text column that holds integers was refused only at ``finalize`` (zero documents); ``plan``
now refuses it, naming the file, the column and its type, as it does a missing column.
"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
from helpers import cli

from shardprep.demo_data import sample_documents
from shardprep.errors import EXIT_INPUT, EXIT_TRANSFER, TransferError


class _Quiet(SimpleHTTPRequestHandler):
    """The standard library's static server: it ignores ``Range`` and answers 200 with the whole file."""

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def no_range_server(tmp_path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "www"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()



@pytest.mark.requires("loader")
def test_a_shard_server_that_ignores_range_is_named_so(no_range_server, sample_tokenizer, capsys):
    pytest.importorskip("fsspec")
    from shardprep.loader.dataset import ShardDataset

    url, root = no_range_server
    (root / "raw").mkdir()
    (root / "raw" / "a.txt").write_text("\n".join(sample_documents(300, seed=5)) + "\n")
    code, _, err = cli("submit", "-i", root / "raw", "-o", root / "out", "-t", sample_tokenizer,
                     "--backend", "hf", "--workers", "1", "--no-progress")
    assert code == 0, err
    with pytest.raises(TransferError) as caught:
        next(iter(ShardDataset(f"{url}/out", seq_len=64, shuffle=False)))
    message = str(caught.value)
    assert "the server ignored the Range request" in message and "HTTP 200" in message, message
    assert "truncated" not in message and "corrupt" not in message


@pytest.mark.requires("remote")
def test_an_input_server_that_ignores_range_is_named_so(no_range_server, tmp_path, sample_tokenizer, capsys):
    pytest.importorskip("fsspec")
    url, root = no_range_server
    (root / "big.txt").write_text("\n".join(sample_documents(3000, seed=2)) + "\n")    # ~0.9 MB: cut in ranges
    code, _, err = cli("plan", "-i", f"{url}/big.txt", "-o", tmp_path / "out", "-t", sample_tokenizer,
                     "--target-task-bytes", "256K", "--force-small-tasks")
    assert code == EXIT_TRANSFER, err
    assert f"{url}/big.txt: the server ignored the Range request" in err
    assert "shorter" not in err and "truncated" not in err


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_text_column_of_integers_is_refused_at_plan_time(tmp_path, sample_tokenizer, capsys, fmt):
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"n": pa.array(range(50), pa.int64()), "body": [f"document {i}" for i in range(50)]})
    path = tmp_path / f"t.{fmt}"
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    out = tmp_path / "out"
    code, _, err = cli("plan", "-i", path, "-o", out, "-t", sample_tokenizer, "--text-field", "n")
    assert code == EXIT_INPUT and len(err.strip().splitlines()) == 1, err
    assert f"{path}: column 'n' holds int64, not text (text columns: body)" in err
    assert not (out / "job.json").exists()
    assert cli("plan", "-i", path, "-o", out, "-t", sample_tokenizer, "--text-field", "body")[0] == 0
