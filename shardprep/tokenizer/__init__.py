"""Tokenizer side: resolving and freezing a tokenizer (``load``) and encoding backends (``backend``)."""
