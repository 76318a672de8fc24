"""Comparing the source with each sink: the range digests and bisection (:mod:`.ranges`), one
table's comparison (:mod:`.compare`) and what it found (:mod:`.comparison`); used by ``cdc
verify`` (:mod:`cdc.cli.verify`) and by the continuous verification of ``cdc run``
(:mod:`cdc.runtime.verifier`)."""
