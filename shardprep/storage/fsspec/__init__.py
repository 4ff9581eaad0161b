"""Every URL but ``s3://`` through fsspec (``gs://``, ``az://``/``abfs://``, ``https://``, ``hf://`` ...), as a
line of imports with no back import: ``client`` (file systems per process, error mapping, exact ranged
reads, listings) <- ``inputs`` (input files listed with their identity and read in their planned version)
<- ``store`` (``FsspecStore``, the ``Store`` that ``storage.locations.SCHEMES`` picks).

Modules import from ``client`` or ``store`` directly.  Inside this package ``import fsspec`` is the fsspec
library (imports are absolute), never this package.
"""
