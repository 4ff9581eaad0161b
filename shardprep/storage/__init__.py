"""Where bytes live: atomic local writes, Lustre placement, the one S3 layer, other object stores via fsspec."""
