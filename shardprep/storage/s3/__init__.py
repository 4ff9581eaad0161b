"""``s3://``: the one S3 layer for staging, the loader and tokenize inputs, as a line of imports with no back
import: ``client`` (URLs, client options, a client per process, error mapping, ranged reads, listings) <-
``inputs`` (input objects listed with their identity and read in their planned version) <- ``store``
(``S3Store``, the ``Store`` that ``storage.locations.SCHEMES`` picks for ``s3://``).

The names people use (``from shardprep.storage.s3 import ClientOptions, make_client``) are re-exported
here; modules inside shardprep import them from ``client`` or ``store`` directly.
"""

from shardprep.storage.s3.client import (
    DEFAULT_PART_SIZE,
    MIB,
    MIN_PART_SIZE,
    ClientOptions,
    S3Location,
    S3Object,
    S3Source,
    check_transfer_settings,
    describe_client_error,
    error_code,
    is_s3_url,
    list_objects,
    make_client,
    object_sizes,
    parse_s3_object,
    parse_s3_url,
    read_object,
    read_range,
    s3_errors,
    sha256_object,
    shared_client,
    transfer_error,
)
from shardprep.storage.s3.store import S3Store

__all__ = [
    "DEFAULT_PART_SIZE", "MIB", "MIN_PART_SIZE", "ClientOptions", "S3Location", "S3Object", "S3Source", "S3Store",
    "check_transfer_settings", "describe_client_error", "error_code", "is_s3_url", "list_objects", "make_client",
    "object_sizes", "parse_s3_object", "parse_s3_url", "read_object", "read_range", "s3_errors", "sha256_object",
    "shared_client", "transfer_error",
]
