"""Sending Bulk API requests and reading their per-item results.

An item is done when it succeeded, when it is a 409 version conflict (the document already has
this change or a newer one) and when a delete found nothing (404: it leaves its version as a
tombstone all the same). A 429 or 5xx item makes the whole batch retriable (it is sent again:
the versions make that harmless); any other refusal is a bad record.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from opensearchpy import OpenSearch

from cdc.contracts.errors import RecordError, SinkUnavailable
from sinks.keyed import Change

Action = tuple[bytes, Change]
#: The field an item's error names (``failed to parse field [qty] of type [long] ...``).
_FIELD = re.compile(r"field \[([^\]]{1,200})\]")
#: What the sink reads of a bulk reply: a fraction of its bytes (an item per document).
_REPLY = "errors,items.*.status,items.*.error"


def chunks(actions: Sequence[Action], max_bytes: int) -> Iterator[Sequence[Action]]:
    """``actions`` in runs whose bodies stay under ``max_bytes`` (one action at least)."""
    start, size = 0, 0
    for i, (lines, _) in enumerate(actions):
        if size and size + len(lines) > max_bytes:
            yield actions[start:i]
            start, size = i, 0
        size += len(lines)
    if start < len(actions):
        yield actions[start:]


def send(client: OpenSearch, actions: Sequence[Action], refresh: str, max_bytes: int) -> None:
    """Send ``actions`` and check every item.

    Raises:
        SinkUnavailable: an item was refused for now (429, 5xx): send the batch again.
        RecordError: an item was refused for good (a mapping error...), naming its record.
    """
    for run in chunks(actions, max_bytes):
        body = b"".join(lines for lines, _ in run)
        reply = client.bulk(body=body, params={"refresh": refresh, "filter_path": _REPLY})
        if reply.get("errors"):
            check(reply["items"], run)


def check(items: Sequence[dict[str, Any]], run: Sequence[Action]) -> None:
    retry: str | None = None
    for item, (_, change) in zip(items, run, strict=True):
        ((op, result),) = item.items()
        status = int(result.get("status", 500))
        if status < 300 or status == 409 or (op == "delete" and status == 404):
            continue
        error = summary(result.get("error"))
        if status == 429 or status >= 500:
            retry = retry or f"{status} {error}"
            continue
        raise RecordError(f"OpenSearch refused a document ({status}): {error}", change.record)
    if retry is not None:
        raise SinkUnavailable(f"OpenSearch refused part of a bulk request for now: {retry}")


def summary(error: object) -> str:
    """An item's error as its type (and its cause's) and the field it names: the reason
    OpenSearch writes quotes the refused value (``Preview of field's value: ...``) and the
    document's id, and a row's values are kept out of errors and logs, as every sink keeps them."""
    if not isinstance(error, dict):
        return "no error detail"
    kind = str(error.get("type", "unknown"))
    cause = error.get("caused_by")
    if isinstance(cause, dict) and cause.get("type"):
        kind = f"{kind}, caused by {cause['type']}"
    found = _FIELD.search(str(error.get("reason", "")))
    return f"{kind} on field {found[1]}" if found else kind
