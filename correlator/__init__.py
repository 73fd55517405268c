"""correlate: name the first failing rank of a distributed training job.

The library is the product; ``correlate`` (``correlator.cli``) is a thin front door over
``correlator.pipeline.analyze``.
"""

from __future__ import annotations

__version__ = "0.1.0"

import os as _os

# numpy's OpenBLAS starts a thread per core at import, and after an operation it hands them its
# threads spin for a while: in a pool of one worker per core that spin took the other worker's core
# (an in-process extraction of the `ours` style measured 2.18 CPU s per GB for 1.34 s of wall, 1.41
# and 1.41 with one BLAS thread). Extraction has no BLAS-sized work; a value the user set is kept.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
