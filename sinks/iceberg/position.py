"""The source position the Iceberg sink's tables are consistent up to, stored as a property of
the sink's namespace (:class:`cdc.contracts.sink.PositionedSink`).

The offsets are per table, in each table's snapshot summary, and one flush commits its tables
one after the other; the position holds for the sink's tables together, so it belongs to no
table's commit. It is written after every table commit of a flush succeeded, in a catalog
call of its own (``update_namespace_properties``, which the SQL and REST catalogs both
implement): a crash between the commits, or before the position's write, leaves the older
position, which lags the tables and never leads them. The key names the pipeline and the sink
(:func:`key`), so sinks sharing a namespace keep one each. A table reset removes it before the
table is dropped.
"""

from __future__ import annotations

from typing import Final

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError

from sinks.offsets import POSITION_FIELD

PREFIX: Final = f"cdc.{POSITION_FIELD}"


def key(pipeline: str, sink: str) -> str:
    """The namespace property holding ``sink``'s position:
    ``cdc.consistent_position.<pipeline>.<sink>``."""
    return f"{PREFIX}.{pipeline}.{sink}"


def store(catalog: Catalog, namespace: str, name: str, position: str) -> None:
    """Replace the stored position (after the commits of the changes it covers)."""
    catalog.update_namespace_properties(namespace, updates={name: position})


def forget(catalog: Catalog, namespace: str, name: str) -> None:
    """No position stored: the tables no longer hold it (a missing one is no error)."""
    catalog.update_namespace_properties(namespace, removals={name})


def read(catalog: Catalog, namespace: str, name: str) -> str | None:
    """The stored position; ``None`` when none is, or the namespace does not exist yet."""
    try:
        properties = catalog.load_namespace_properties(namespace)
    except NoSuchNamespaceError:
        return None
    return properties.get(name) or None
