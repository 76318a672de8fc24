"""The external version of a change: its source position packed into OpenSearch's version.

OpenSearch keeps, per document, the version of its last write (and of a delete, for
``index.gc_deletes``), and with ``version_type=external`` refuses a write whose version is not
higher (a 409 conflict). So a replay or a reordered older change of a key is refused by the
server itself, and the sink counts that 409 as done. A version is a non-negative 63-bit long;
a position is ``(position, sequence)``, packed as:

- PostgreSQL (and every source but MongoDB): ``lsn << 16 | sequence``. Exact while the
  transaction's sequence is below 65535 and the LSN below 2**47 (128 TiB of WAL written over
  the server's life); a larger sequence is packed as 65535.
- MongoDB: the position alone, ``clusterTime.seconds << 32 | clusterTime.increment`` (already
  63 bits until 2038); every event of one clusterTime (a multi-document transaction) has the
  same version.

Where two changes of one key can share a version (the packed sequence, a MongoDB transaction),
the write goes with ``version_type=external_gte``: an equal version is accepted, so the later
change of the two, delivered after the earlier one as the log delivers a key's changes in
order, wins; a change with a lower version is still refused. Everywhere else it is exact and
goes with ``external``. Within a batch the sink keeps each key's newest change by the full
position first, so only changes of different batches meet at the server.
"""

from __future__ import annotations

from typing import Final

from cdc.contracts.errors import SinkFatal

SEQUENCE_BITS: Final = 16
SATURATED: Final = (1 << SEQUENCE_BITS) - 1
MAX_POSITION: Final = 1 << (63 - SEQUENCE_BITS)
MAX_VERSION: Final = (1 << 63) - 1
MONGODB: Final = "mongodb"


def version(position: int, sequence: int, connector: object) -> tuple[int, str]:
    """``(version, version_type)`` of a change at ``(position, sequence)`` of ``connector``.

    Raises:
        SinkFatal: the position is past what a version holds (see the module docstring).
    """
    if connector == MONGODB:
        if position > MAX_VERSION:
            raise SinkFatal(f"MongoDB position {position} is past OpenSearch's version range")
        return position, "external" if sequence == 0 else "external_gte"
    if position >= MAX_POSITION:
        raise SinkFatal(
            f"source position {position} is past 2**47, the largest an OpenSearch version "
            "holds with its sequence (see docs/sinks/opensearch.md, Versions)"
        )
    if sequence < SATURATED:
        return position << SEQUENCE_BITS | sequence, "external"
    return position << SEQUENCE_BITS | SATURATED, "external_gte"
