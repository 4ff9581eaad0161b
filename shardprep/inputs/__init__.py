"""Input side: finding input files (``discover``) and streaming documents out of them (``readers``)."""
