"""Hugging Face datasets in and out: ``source`` opens a dataset, ``export`` writes balanced jsonl/txt files."""
