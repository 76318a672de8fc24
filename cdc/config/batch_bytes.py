"""Byte bounds of a batch: how much a source poll or a sink read holds at most, about.

A batch bounded only by its count holds count x value size: 2,000 records of 1 MB values are
2 GB. So sources (``max_batch_bytes``) and sinks (``batch_bytes``) stop adding to a batch once it
holds about this many bytes of values, and a batch always takes at least one record, so a single
value larger than the bound still flows. The bound is on the bytes as read (a change's WAL
message, a record's stored value); a batch holds each in a few forms at once (read, decoded,
encoded), so its memory is a small multiple of it.

In a pipeline file a size is a number of bytes or a number with a unit: ``16MiB``, ``8MB``,
``512KiB``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, ByteSize, TypeAdapter, ValidationError

MIN_BATCH_BYTES = 64 * 1024
MAX_BATCH_BYTES = 1024 * 1024 * 1024
#: The default of both bounds. A few batches are alive at once (the source's, each sink's, in a
#: few forms each): 16 MiB keeps a pipeline streaming 1 MB values near its small-value RSS, and
#: is thousands of ordinary rows, so it never cuts a batch of small values short.
BATCH_BYTES = 16 * 1024 * 1024

_SIZE = TypeAdapter(ByteSize)


def parse_batch_bytes(value: Any) -> int:
    """``value`` (bytes, or a size with a unit) as bytes, within the bounds.

    Raises:
        ValueError: not a size, or out of bounds (the message says which and what is allowed).
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be a size in bytes or with a unit such as 16MiB (got {value!r})")
    try:
        size = int(_SIZE.validate_python(value))
    except ValidationError:
        raise ValueError(
            f"must be a size in bytes or with a unit such as 16MiB, 8MB, 512KiB (got {value!r})"
        ) from None
    if not MIN_BATCH_BYTES <= size <= MAX_BATCH_BYTES:
        raise ValueError(f"must be between 64KiB and 1GiB (got {value!r}, {size} bytes)")
    return size


#: A byte bound in a config model: an ``int`` of bytes once validated.
BatchBytes = Annotated[int, BeforeValidator(parse_batch_bytes)]
