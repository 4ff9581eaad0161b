"""Shards at any URL fsspec knows (``gs://``, ``az://``, ``abfs://``, ``https://``, ``hf://`` ...), read in ranges.

``s3://`` never comes here: it stays on the one S3 layer (``storage/s3/``), so s3fs is not needed.  For
everything else fsspec picks the file system from the URL (gcsfs, adlfs, its own HTTP one, huggingface_hub's
``HfFileSystem``) and ``options`` (fsspec's ``storage_options``) go to that file system's constructor;
credentials otherwise come from each library's usual places (``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_CONNECTION_STRING``, ``HF_TOKEN``, fsspec's ``FSSPEC_<PROTOCOL>_<OPTION>`` variables ...).

A shard is never downloaded whole: :class:`FsspecSource` reads exactly the byte ranges asked for (one
``cat_file(path, start, end)`` each, the sidecar's chunk table giving the offsets), and a server that
ignores ``Range`` is an error, not a silent full download.  Retries are the file system's own (gcsfs and
adlfs retry transient errors; fsspec's HTTP does not).  File system instances come from fsspec's cache,
which is per process id, so a forked DataLoader worker never uses its parent's event loop or sessions -
and never finalizes them either (see :func:`_keep_inherited_file_systems`).

The fsspec store (``store.py``) and its inputs (``inputs.py``) build on this module; it imports neither.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Mapping

from shardprep.errors import (
    ConfigError,
    EnvironmentProblem,
    ShardprepError,
    TransferError,
)
from shardprep.storage.objects import http_status, retrying
from shardprep.storage.store import exact

EXTRA = "remote"


def resolve(url: str, options: Mapping[str, Any]) -> tuple[Any, str]:
    """``(file system, path)`` for ``url``: fsspec's choice, built with ``options``.

    A missing optional package is one line naming the extra to install.
    """
    scheme = url.split("://", 1)[0]
    try:
        import fsspec
        from fsspec.core import url_to_fs
    except ImportError as e:
        raise _missing(url, scheme, e) from None
    _register_fork_hook()
    try:
        return url_to_fs(url, **options)
    except ImportError as e:
        raise _missing(url, scheme, e) from None
    except ValueError as e:
        if scheme not in fsspec.available_protocols():
            raise ConfigError(f"{url}: no fsspec file system for {scheme}:// ({e})") from None
        raise ConfigError(f"{url}: {e}") from None


# File systems a forked child inherited from its parent.  Held for the child's whole life (it leaves through
# os._exit, so they are never finalized there).
_INHERITED: list[Any] = []
_FORK_HOOK: list[bool] = []


def _register_fork_hook() -> None:
    if not _FORK_HOOK and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_keep_inherited_file_systems)
        _FORK_HOOK.append(True)


def _keep_inherited_file_systems() -> None:
    """In a forked child, never finalize what the parent's file systems own: keep them alive, freeze the rest.

    Why: an async file system (fsspec's HTTP, gcsfs, adlfs) that is garbage collected closes its aiohttp
    connector (fsspec's ``close_session`` finalizer, aiohttp's ``__del__``).  In a forked child that closes
    the parent's transports through a copy of the parent's event loop, whose epoll descriptor is *shared*
    with the parent: the parent's sockets are unregistered from the parent's own epoll, and its next read
    waits until aiohttp's 300 s timeout (seen with DataLoader workers over HTTP).  Two ways an inherited
    session dies in the child: fsspec empties its instance cache in a new process (the last reference to a
    live file system), and the child's cyclic GC collects garbage the parent had not collected yet.  So the
    cached instances are held here for the child's life (it leaves through ``os._exit``), and everything
    inherited is moved out of the collector's reach (``gc.freeze``, which also spares copy-on-write pages).
    """
    import gc

    from fsspec.spec import AbstractFileSystem

    pending = [AbstractFileSystem]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        cache = cls.__dict__.get("_cache")
        if cache:
            _INHERITED.extend(cache.values())
    gc.freeze()


def _missing(url: str, scheme: str, e: ImportError) -> EnvironmentProblem:
    from shardprep._extras import MissingExtra

    return MissingExtra(f"{url}: reading {scheme}:// needs a package that is not installed ({e})",
                        hint=f"pip install 'shardprep[{EXTRA}]'")


@contextlib.contextmanager
def remote_errors(what: str) -> Iterator[None]:
    """File system exceptions made ours, naming ``what``, as ``storage.s3.client.s3_errors`` does for S3.

    Missing: ``FileNotFoundError``; a range past the end (HTTP 416): ``EOFError``; anything else the
    library raised (after its own retries): a one-line :class:`TransferError`.
    """
    try:
        yield
    except (ShardprepError, EOFError):
        raise
    except FileNotFoundError as e:
        if e.__cause__ is None or http_status(e.__cause__) == 404:
            raise FileNotFoundError(f"{what}: no such file") from None
        raise _transfer_error(what, e.__cause__) from None      # fsspec's HTTP: any failed HEAD is "not found"
    except Exception as e:  # each library has its own exception tree; all of them end here
        status = http_status(e)
        if status == 404:
            raise FileNotFoundError(f"{what}: no such file (HTTP 404)") from None
        if status == 416:
            raise EOFError(f"{what}: truncated: the range starts past the end of the file") from None
        raise _transfer_error(what, e) from None


def _transfer_error(what: str, e: BaseException) -> TransferError:
    status = http_status(e)
    detail = (str(e).strip().splitlines() or [""])[0]
    hint = "check the credentials for this store" if isinstance(e, PermissionError) or status in (401, 403) else None
    return TransferError(f"{what}: {type(e).__name__}: {detail}", hint=hint)


class FsspecSource:
    """One remote file as a ``ByteSource`` (``FsspecStore.open``): each read is one ranged read of exact bytes (tried ``attempts``
    times while it fails transiently).

    The file system is looked up again after a fork (fsspec's instance cache is per process).
    """

    def __init__(self, url: str, options: Mapping[str, Any], *, attempts: int = 1):
        self.path = url
        self.options = options
        self.attempts = attempts        # > 1: transient failures retried (storage.objects.retrying)
        self._pid = -1
        self._fs: Any = None
        self._fs_path = ""

    def resolved(self) -> tuple[Any, str]:
        if self._pid != os.getpid():
            if self._fs is not None:
                _INHERITED.append(self._fs)     # the parent's: never finalized in this child
            self._fs, self._fs_path = resolve(self.path, self.options)
            self._pid = os.getpid()
        return self._fs, self._fs_path

    def read(self, offset: int, size: int) -> bytes:
        if size <= 0:
            return b""
        fs, path = self.resolved()
        what = f"{self.path}: read {size} bytes at {offset}"
        with remote_errors(what):
            data = retrying(lambda: fs.cat_file(path, start=offset, end=offset + size), what, attempts=self.attempts)
        return exact(data, self.path, offset, size)

    def close(self) -> None:  # file systems are shared per process; nothing to release
        pass


def read_object(url: str, options: Mapping[str, Any]) -> bytes:
    """A whole small file (index.json, a sidecar); ``FileNotFoundError`` when it does not exist."""
    fs, path = resolve(url, options)
    with remote_errors(f"{url}: read"):
        return fs.cat_file(path)


def object_sizes(root: str, options: Mapping[str, Any]) -> Mapping[str, int]:
    """``{name: size}`` of the files directly under ``root``: one listing, or for HTTP a HEAD per name asked.

    HTTP has no listing (a server's HTML index is not one), so there the sizes are looked up lazily, only
    for the names the caller asks about.
    """
    fs, path = resolve(root.rstrip("/"), options)
    if is_http(fs):
        return HeadSizes(fs, root)
    with remote_errors(f"listing {root}"):
        entries = fs.ls(path, detail=True)
    return {e["name"].rstrip("/").rsplit("/", 1)[-1]: int(e["size"]) for e in entries if e.get("type") == "file"}


def is_http(fs: Any) -> bool:
    """Is ``fs`` fsspec's HTTP file system (no listings; a HEAD per file)?"""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return bool({"http", "https"} & set(protocols))


class HeadSizes(Mapping[str, int]):
    """Sizes under an HTTP ``root``, one HEAD per name looked up (cannot be listed or counted)."""

    def __init__(self, fs: Any, root: str):
        self._fs, self._root = fs, root.rstrip("/")

    def __getitem__(self, name: str) -> int:
        url = f"{self._root}/{name}"
        try:
            with remote_errors(f"{url}: HEAD"):
                return int(self._fs.info(url)["size"])
        except FileNotFoundError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        raise TypeError(f"{self._root}: an HTTP location cannot be listed; look sizes up by name")

    def __len__(self) -> int:
        raise TypeError(f"{self._root}: an HTTP location cannot be listed; look sizes up by name")


def sha256_object(url: str, options: Mapping[str, Any], *, block: int = 8 << 20) -> str:
    """sha256 of a whole remote file, streamed in ``block``-byte reads (``verify``)."""
    from shardprep.storage.atomic import sha256_reader

    fs, path = resolve(url, options)
    with remote_errors(f"{url}: read"), fs.open(path, "rb", block_size=block) as f:
        return sha256_reader(f, block=block)
