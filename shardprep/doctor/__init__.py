"""``shardprep doctor``: pre-flight checks (``checks``) and machine facts (``machine``)."""
