"""Which snapshot a PostgreSQL start needs, from the mode, the stored position and the slot
(pure).

The modes mean what Debezium users expect:

* ``initial`` (default): snapshot when the log holds no position yet, then stream.
* ``never``: only stream. A lost slot with a stored position stays a loud failure.
* ``always``: snapshot at every start. Without a slot (or position) this is an exported
  snapshot; with a healthy slot the tables are re-read with watermarks while streaming resumes
  from the stored position, so no change between the two is missed.
* ``when_needed``: snapshot when there is no position, or when the stored position can no longer
  be honoured (the slot is gone, or the slot already confirmed past the position).

An unfinished snapshot stored in the log is resumed in every mode: its finished chunks are kept
and the rest are read with watermarks while the stream runs.

A table added to ``source.tables`` after the first start has rows the log never saw: it is
snapshotted while streaming (the ``cdc snapshot`` path) in every mode but ``never``, unless this
start reads every table anyway. A table removed from it is no longer captured; its topic stays.
"""

from __future__ import annotations

from dataclasses import dataclass

from connectors.postgres.lsn import Lsn
from snapshots.modes import Action, Decision


@dataclass(frozen=True, slots=True)
class StartState:
    """What a start finds.

    Attributes:
        stored_lsn: the position stored in the log, if any.
        slot_exists: the replication slot exists.
        confirmed_lsn: the slot's ``confirmed_flush_lsn`` (when it exists).
        unfinished: the log holds a snapshot with chunks not yet read, or requests not yet
            planned.
    """

    stored_lsn: Lsn | None
    slot_exists: bool
    confirmed_lsn: Lsn | None
    unfinished: bool


def decide(mode: str, start: StartState) -> Decision:
    """The snapshot work of this start; ``reason`` is logged."""
    stored = start.stored_lsn
    if stored is None:
        if mode == "never":
            return Decision(Action.STREAM, "snapshot mode never")
        return Decision(Action.EXPORT, "no stored position: the pipeline starts with a snapshot")
    if not start.slot_exists:
        if mode in ("when_needed", "always"):
            return Decision(
                Action.EXPORT,
                "the replication slot is gone while a position is stored: changes after it may "
                "have been lost, so the tables are snapshotted again on a new slot",
            )
        return Decision(Action.STREAM, "slot missing; the source reports the lost position")
    behind = start.confirmed_lsn is not None and stored < start.confirmed_lsn
    if start.unfinished:
        return Decision(Action.RESUME, "an unfinished snapshot is stored: resuming it")
    if mode == "always":
        return Decision(Action.WATERMARK_ALL, "snapshot mode always")
    if behind and mode == "when_needed":
        return Decision(
            Action.WATERMARK_ALL,
            "the slot confirmed a position beyond the stored one: changes in between cannot be "
            "streamed, so the tables are re-read with watermarks",
        )
    return Decision(Action.STREAM, "resuming the stream from the stored position")
