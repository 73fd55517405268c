"""Stage two: over the digests of every source, who is who, whose clock is off, and what failed first.

``identity`` joins identity statements into global ranks and hosts; ``clocks`` estimates each host's
offset; ``attribution`` is the verdict model. Nothing here reads a log: it sees digests only, and it
imports nothing from ``correlator.extract``.
"""
