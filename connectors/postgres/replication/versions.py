"""What each PostgreSQL version offers the source, decided from ``server_version_num`` alone.

Pure functions, tested without a server: the range the source supports, and the options of
``START_REPLICATION`` for pgoutput. Every option a version lacks is refused here, at start,
with the version it needs, rather than by the server deep inside the replication command.

The pgoutput protocol versions (PostgreSQL's "Logical Replication Message Formats"):

- 2 (PostgreSQL 14): in-progress transactions may be streamed (``streaming = on``).
- 3 (PostgreSQL 15): two-phase commit messages, sent only when ``two_phase`` is asked for.
  The source never asks: a prepared transaction may stay prepared for days and across server
  restarts, and the log only takes committed transactions, so it would have to be kept
  outside the log until ``COMMIT PREPARED``; with ``two_phase`` off the server decodes it at
  ``COMMIT PREPARED`` as one ordinary transaction, which is what the log needs. On the wire 3
  is then the same as 2.
- 4 (PostgreSQL 16+): ``streaming = parallel``, whose ``Stream Abort`` also carries the abort
  LSN and time. The server streams the same blocks as with ``on``; the source spools them to
  commit either way (:mod:`connectors.postgres.replication.inprogress`), and logs where an
  abort happened.
"""

from __future__ import annotations

from cdc.contracts.errors import SourceFatal

#: The oldest server the source supports (and is tested on): PostgreSQL 14.
MIN_VERSION = 140000
#: ``origin = none``, to skip what a logical subscriber applied (``source.skip_replicated``).
ORIGIN_NONE_VERSION = 160000
#: ``pg_replication_slots.inactive_since`` and ``invalidation_reason``.
SLOT_INACTIVE_SINCE_VERSION = 170000

#: ``proto_version`` per major version: the highest each server speaks (16 and later: 4).
_PROTOCOLS = {14: 2, 15: 3}
_LATEST_PROTOCOL = 4
_PARALLEL_STREAMING_PROTOCOL = 4


def major(version: int) -> int:
    """The major version of ``server_version_num`` (140019 -> 14, 170006 -> 17)."""
    return version // 10000


def check_supported(version: int, where: str) -> None:
    """Refuse a server older than PostgreSQL 14.

    Args:
        version: its ``server_version_num``.
        where: the redacted DSN, for the message.

    Raises:
        SourceFatal: the server is older than 14 (which lacks the replication protocol and
            the pgoutput options the source relies on).
    """
    if version < MIN_VERSION:
        raise SourceFatal(
            f"PostgreSQL {_shown(version)} on {where} is not supported: the source needs "
            f"PostgreSQL {major(MIN_VERSION)} or later (tested on 14 to 18); upgrade the server"
        )


def protocol_version(version: int) -> int:
    """The pgoutput ``proto_version`` to ask ``version`` for: 2 on 14, 3 on 15, 4 on 16+."""
    return _PROTOCOLS.get(major(version), _LATEST_PROTOCOL)


def stream_options(
    version: int,
    publication: str,
    *,
    stream_in_progress: bool = False,
    skip_replicated: bool = False,
) -> dict[str, str]:
    """The pgoutput options of ``START_REPLICATION`` on a server of ``version``.

    ``messages`` is always on: heartbeats, snapshot watermarks and ``cdc snapshot`` signals
    are ``pg_logical_emit_message`` payloads, which pgoutput drops unless asked for.
    ``binary`` stays off: the decoders and the native encoder read the text format.

    Args:
        version: ``server_version_num`` (14 or later: see :func:`check_supported`).
        publication: the publication to stream.
        stream_in_progress: stream large transactions before they commit.
        skip_replicated: leave out changes a logical subscriber applied (``origin = none``).

    Raises:
        SourceFatal: ``skip_replicated`` on a server older than 16.
    """
    proto = protocol_version(version)
    options = {
        "proto_version": str(proto),
        "publication_names": publication,
        "messages": "true",
    }
    if stream_in_progress:
        options["streaming"] = "parallel" if proto >= _PARALLEL_STREAMING_PROTOCOL else "on"
    if skip_replicated:
        if version < ORIGIN_NONE_VERSION:
            raise SourceFatal(
                "source.skip_replicated needs PostgreSQL 16 or later (the pgoutput option "
                f"origin = none); the server runs {_shown(version)}: remove the option or "
                "upgrade the server"
            )
        options["origin"] = "none"
    return options


def _shown(version: int) -> str:
    """``server_version_num`` as people write it: 140019 -> "14.19", 90624 -> "9.6.24"."""
    if version >= 100000:
        return f"{version // 10000}.{version % 10000}"
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"
