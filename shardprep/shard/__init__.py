"""The shard format: names, writer, sidecars, readers (spec: docs/format.md)."""
