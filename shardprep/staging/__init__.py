"""S3 <-> local/Lustre transfers: ``stage`` (S3 prefix -> directory) and ``upload`` (directory -> S3).

Layers, bottom up: ``shardprep.storage.s3.client`` (client from the standard credential chain, retries), ``keys``
(which keys may become local paths), ``manifest`` (listing, filters, record of verified copies),
``integrity`` (ETag/checksum evidence), ``summary`` (counters and progress), then ``stage`` and ``upload``.  Heavy
imports (boto3, s3transfer) happen inside functions so ``import shardprep`` stays fast.
"""
