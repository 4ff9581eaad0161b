"""``python -m shardprep`` is the same as the ``shardprep`` console script."""

from shardprep.cli.main import main

raise SystemExit(main())
