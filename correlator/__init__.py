"""correlate: name the first failing rank of a distributed training job.

The library is the product; ``correlate`` (``correlator.cli``) is a thin front door over
``correlator.pipeline.analyze``.
"""

from __future__ import annotations

__version__ = "0.1.0"
