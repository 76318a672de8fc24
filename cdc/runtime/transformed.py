"""Run change events through the pipeline's transforms, with ``bad_records`` for those a
transform fails on: the one place the source task and a source that writes its own records
(a snapshot's) do it."""

from __future__ import annotations

from collections.abc import Sequence

from cdc.contracts.events import ChangeEvent
from cdc.contracts.source import DeadLetter
from cdc.transforms.base import TransformError
from cdc.transforms.chain import TransformChain


def apply_chain(
    chain: TransformChain, events: Sequence[ChangeEvent], bad_records: str
) -> tuple[list[ChangeEvent], list[DeadLetter]]:
    """The events ``events`` become through ``chain``, and the dead letters of those it failed
    on under ``bad_records: dead_letter``.

    Raises:
        TransformError: a transform failed and ``bad_records`` is ``fail``.
    """
    out: list[ChangeEvent] = []
    letters: list[DeadLetter] = []
    for event in events:
        try:
            out.extend(chain.apply(event))
        except TransformError as exc:
            if bad_records != "dead_letter":
                raise
            letters.append(transform_letter(event, exc))
    return out, letters


def transform_letter(event: ChangeEvent, exc: TransformError) -> DeadLetter:
    """The dead letter of an event a transform failed on: where it is, not its rows (which the
    reason and the source can give again)."""
    src = event.source
    payload = {"op": event.op.value, "position": src.position, "sequence": src.sequence}
    return DeadLetter(table=event.table_id, key=dict(event.key), reason=exc.reason, payload=payload)
