"""What a Slurm job needs to reach an object store: the non-secret settings of each store's standard
credential chain, never a key.

Why: jobs run with ``--export=NONE`` and their scripts are files other users may read, so keys must not be
written into them.  A job authenticates the way the compute node does (``~/.aws``, an instance or workload
role, a service-account file, a managed identity); the settings that *point* at those (a profile name, a
region, an endpoint, a credentials file's path) are passed on.  The stage job (``stage --submit``) and the
tokenize array of a plan with remote inputs (issue 22) get the same ones.  A secret found in the
environment is left out with a warning saying where the job will look instead.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Mapping

log = logging.getLogger(__name__)

# Non-secret settings passed to a job; keys, secrets and session tokens never are.
AWS_SETTINGS = ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                "AWS_EC2_METADATA_DISABLED", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "NO_PROXY", "no_proxy")
AWS_SECRETS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# gs:// (gcsfs: a service-account file's path, the project, an emulator) and az:// (adlfs: the account and a
# workload identity's ids and token file; the connection string and the account key are secrets)
OTHER_SETTINGS = ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "STORAGE_EMULATOR_HOST",
                  "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE",
                  "AZURE_AUTHORITY_HOST")
OTHER_SECRETS = ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
                 "AZURE_CLIENT_SECRET")
# fsspec's own configuration (FSSPEC_<PROTOCOL>_<OPTION>): passed unless the option names a secret
_FSSPEC = re.compile(r"FSSPEC_[A-Z0-9]+_[A-Z0-9_]+")     # fullmatch: no newline in a name
_SECRET_WORDS = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CONNECTION_STRING|SAS|CREDENTIAL")

# Where a job can find AWS credentials without the environment keys (a profile, web identity, a container).
AWS_OTHER_SOURCES = ("AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI")


def _credential_files(environ: Mapping[str, str]) -> list[Path]:
    """The AWS credentials and config files the job would read (the shared home is the job's home too)."""
    home = Path(environ.get("HOME") or Path.home())
    return [Path(environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials"),
            Path(environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config")]


def store_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The settings of ``environ`` a job may be given to reach object stores (no secrets; see above)."""
    env = {k: environ[k] for k in (*AWS_SETTINGS, *OTHER_SETTINGS) if environ.get(k)}
    env.update({k: v for k, v in environ.items() if v and _FSSPEC.fullmatch(k) and not _SECRET_WORDS.search(k[7:])})
    if any(environ.get(k) for k in AWS_SECRETS):
        elsewhere = (any(environ.get(k) for k in AWS_OTHER_SOURCES)
                     or any(f.is_file() and str(f) != os.devnull for f in _credential_files(environ)))
        log.warning("AWS keys in environment variables are not passed to the Slurm job (they would be "
                    "written into its script); the job authenticates with ~/.aws or the instance role%s",
                    "" if elsewhere else ": no ~/.aws credentials or config file and no AWS_PROFILE were found, "
                    "so unless the compute nodes have an instance role the job cannot authenticate (put the "
                    "keys in ~/.aws/credentials, e.g. with `aws configure`)")
    left = [k for k in environ if environ[k] and (k in OTHER_SECRETS or (_FSSPEC.fullmatch(k) and k not in env))]
    if left:
        log.warning("%s not passed to the Slurm job (secrets are never written into its script): the job "
                    "authenticates as the compute node does (a service-account file, a managed or workload "
                    "identity)", ", ".join(sorted(left)))
    return env
