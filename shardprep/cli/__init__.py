"""The command line: one module per command, a small root (``main.py``) with one error boundary."""
