"""Entry point of the tokenization benchmark: ``python bench/tokenize.py [--quick]`` (see tokenize_bench.py).

This file shares its name with the standard library's ``tokenize``, which ``inspect``/``linecache``
import.  Any script run from bench/ has bench/ first on ``sys.path``, so an ``import tokenize`` anywhere
(torch, datatrove, dataclasses...) would land here.  Imported under any name other than ``__main__``, this
module therefore loads the real standard-library module and hands it over in ``sys.modules``; run as a
script, it moves bench/ behind the standard library on ``sys.path`` before importing anything else.
"""

import os
import sys

if __name__ == "__main__":
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here] + [_here]
    from tokenize_bench import main

    raise SystemExit(main())
else:
    import importlib.util

    _spec = importlib.util.spec_from_file_location(__name__, os.path.join(os.path.dirname(os.__file__), "tokenize.py"))
    _real = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _real
    _spec.loader.exec_module(_real)
