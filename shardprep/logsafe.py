"""Logs carry no credentials: the HTTP and cloud libraries' loggers stay at WARNING, and a filter on
shardprep's own handlers masks what a credential looks like.

Why (issue 31): ``shardprep -v`` set the root logger to DEBUG, and botocore's DEBUG request dumps carry the
access key id (``Authorization: AWS4-HMAC-SHA256 Credential=AKIA...``) and the session token
(``X-Amz-Security-Token``); at INFO botocore announced where it found the credentials in every run and in
every Slurm task's log.  Logs are files other users read (``OUTPUT/logs``, shared terminals, pasted issues).
``-v`` is for shardprep's own debug lines; the libraries' request traces are not among them.

Two lines of defence: :data:`QUIET_LOGGERS` are held at WARNING whatever the level (:func:`quiet_libraries`),
and :class:`RedactSecrets` masks, in any record a handler writes, the values of ``Authorization`` and the
signing headers and query parameters, anything shaped like an AWS access key id, secret assignments, and the
literal values of the credential variables in the environment.  Imports nothing of shardprep.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Iterable, Mapping

# Loggers of the libraries that send credentials over HTTP (request dumps, "found credentials in ...").
QUIET_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "aiobotocore", "s3fs", "gcsfs", "google.auth",
                 "adlfs", "azure", "fsspec", "httpx", "httpcore")
# Environment variables holding secrets: their values are masked wherever they appear.
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
              "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN",
              "AZURE_CLIENT_SECRET", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MASK = "***"

_NAMES = (r"authorization|proxy-authorization|x-amz-security-token|x-amz-credential|x-amz-signature|"
          r"x-goog-credential|x-goog-signature|aws_access_key_id|aws_secret_access_key|aws_session_token|"
          r"secretaccesskey|sessiontoken|secret_key|accountkey|sharedaccesssignature|sig|signature|credential")
_QUOTED = re.compile(rf"(?i)(\b(?:{_NAMES})['\"]?\s*[:=]\s*b?)(['\"])(.*?)\2")     # 'Authorization': b'...'
_QUERY = re.compile(rf"(?i)(\b(?:{_NAMES})=)([^&\s'\";]+)")                          # ?X-Amz-Signature=...
_HEADER = re.compile(rf"(?im)^(\s*(?:{_NAMES}):[ \t]*)(.+)$")                       # Authorization: ...
_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}\b")


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with every credential-looking value replaced by :data:`MASK` (see the module's docstring)."""
    environ = os.environ if environ is None else environ
    for name in SECRET_ENV:
        value = environ.get(name) or ""
        if len(value) >= 6 and value in text:
            text = text.replace(value, MASK)
    text = _QUOTED.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}{m.group(2)}", text)
    text = _QUERY.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _HEADER.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return _KEY_ID.sub(MASK, text)


class RedactSecrets(logging.Filter):
    """A handler filter: the record's message (and any formatted traceback) with credentials masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def quiet_libraries() -> None:
    """Hold :data:`QUIET_LOGGERS` at WARNING, whatever level the root logger has (``-v``: DEBUG)."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level != logging.WARNING:   # setLevel clears every logger's cache: torch has hundreds
            logger.setLevel(logging.WARNING)


def protect(handlers: Iterable[logging.Handler]) -> None:
    """:func:`quiet_libraries`, and a :class:`RedactSecrets` filter on each of ``handlers`` (once)."""
    quiet_libraries()
    for handler in handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())
