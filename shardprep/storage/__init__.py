"""Where bytes live: atomic local writes, Lustre placement, the S3 client layer."""
