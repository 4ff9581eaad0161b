"""``verify`` and ``inspect`` of a shardprep output at a URL (``s3://``, ``gs://``, ``az://``, ``https://``, ``hf://``).

Remote stores are reached as the loader reaches them (``loader.sources``), with credentials and endpoints
from the environment (``AWS_PROFILE``, ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_CONNECTION_STRING``, ``HF_TOKEN``, fsspec's ``FSSPEC_<PROTOCOL>_<OPTION>`` ...).
``inspect`` reads the shard's sidecar and only the byte ranges of the documents it decodes, never the
whole shard; ``verify`` has to read every byte (it re-hashes every shard).
"""

from __future__ import annotations

import argparse

import numpy as np

from shardprep.errors import InputDataError
from shardprep.shard.sidecar import Sidecar
from shardprep.storage.locations import join, open_source, read_bytes
from shardprep.shard.format import TOKENIZER_FILE
from shardprep.shard.reader import read_chunk, split_docs


def verify_remote(url: str) -> int:
    """Every shard's size, sidecar and sha256 against index.json; the first bad shard raises (exit 5)."""
    from shardprep.loader.index import load_index

    index = load_index(url, verify=True)
    print(f"{url}: all {len(index.shards)} shards verified (sizes, sidecars and sha256 against index.json)")
    return 0


def inspect_remote(args: argparse.Namespace) -> int:
    """The summary of a remote shard from its sidecar, and its first documents read in ranges."""
    from shardprep.cli.inspect import print_documents, print_sidecar

    url = str(args.shard)
    if not url.endswith(".tar"):
        raise InputDataError(f"{url}: not a shard URL (shard-NNNNN.tar expected)")
    parent = url.rsplit("/", 1)[0]
    where = url[:-len(".tar")] + ".json"
    try:
        sidecar = Sidecar.parse(read_bytes(where), where)
    except FileNotFoundError:
        raise InputDataError(f"{url}: no sidecar beside it: a remote shard is inspected through its sidecar "
                             f"(copy it locally to walk the tar)") from None
    print(f"{url}: {sidecar.bytes:,} bytes, {sidecar.samples} sample(s), {sidecar.documents:,} documents, "
          f"{sidecar.tokens:,} tokens (from its sidecar)")
    print_sidecar(sidecar, sidecar.bytes, sidecar.tokens)
    docs: list[np.ndarray] = []
    src = open_source(url)
    for chunk in sidecar.chunks.chunks():
        if len(docs) >= args.decode:
            break
        docs.extend(split_docs(*read_chunk(src, chunk, sidecar.dtype))[: args.decode - len(docs)])
    if docs:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(args.tokenizer) if args.tokenizer else \
            Tokenizer.from_str(read_bytes(join(parent, TOKENIZER_FILE)).decode("utf-8"))
        print_documents(docs, tok, args.max_chars)
    return 0
