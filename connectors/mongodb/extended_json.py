"""MongoDB records back into rows a sink stores: Debezium's text forms to relaxed Extended JSON.

A MongoDB record's value holds what Debezium's MongoDB connector writes: ``after``/``before``
as a JSON *string* in the Java driver's STRICT mode (``{"$numberLong": "5"}``,
``{"$date": 1704164645123}``, bare ``NaN``...); its key is ``{"_id": ...}`` in relaxed
Extended JSON. Sinks keep storing what they always stored: the row as an object of relaxed
Extended JSON values (the form ``bson.json_util`` writes with ``RELAXED_JSON_OPTIONS``,
``cdc verify`` reads from the source, and the sinks' tests hold). :func:`rows` is the one place
that turns the first into the second: the MongoDB plugin hands it to the sinks as its
``record_rows``; a record is changed only when its ``source.connector`` says MongoDB.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

import orjson

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MAX_ISO_MS: Final = 253_402_300_799_999


def _relaxed_date(millis: int) -> dict[str, Any]:
    if 0 <= millis <= _MAX_ISO_MS:
        moment = _EPOCH + dt.timedelta(milliseconds=millis)
        fraction = f".{millis % 1000:03d}" if millis % 1000 else ""
        return {"$date": f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}{fraction}Z"}
    return {"$date": {"$numberLong": str(millis)}}


def _iso_date(text: str) -> dict[str, Any]:
    """A relaxed ``$date`` string in the one spelling the rows use (three fraction digits)."""
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    delta = moment - _EPOCH
    millis = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return _relaxed_date(millis)


def _float(value: float) -> Any:
    if value != value:
        return {"$numberDouble": "NaN"}
    if value in (float("inf"), float("-inf")):
        return {"$numberDouble": "Infinity" if value > 0 else "-Infinity"}
    return value


def _wrapper(value: dict[str, Any]) -> Any:
    """One STRICT (or relaxed) type wrapper in its relaxed form; ``None`` if not one."""
    if len(value) == 1:
        name, inner = next(iter(value.items()))
        if name == "$numberLong" and isinstance(inner, str):
            return int(inner)
        if name == "$date":
            if isinstance(inner, int):
                return _relaxed_date(inner)
            if isinstance(inner, str):
                return _iso_date(inner)
    elif len(value) == 2:
        if "$binary" in value and "$type" in value and isinstance(value["$binary"], str):
            return {"$binary": {"base64": value["$binary"], "subType": value["$type"]}}
        if "$regex" in value and "$options" in value:
            options = {"pattern": value["$regex"], "options": value["$options"]}
            return {"$regularExpression": options}
    return None


def relaxed(value: Any) -> Any:
    """A parsed STRICT value as the row holds it (relaxed Extended JSON)."""
    if isinstance(value, dict):
        if value and next(iter(value)).startswith("$"):
            converted = _wrapper(value)
            if converted is not None:
                return converted
        return {k: relaxed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [relaxed(v) for v in value]
    if isinstance(value, float):
        return _float(value)
    return value


def document(text: str) -> dict[str, Any]:
    """``after``/``before`` text as the row object."""
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:  # Java writes NaN and the infinities bare
        parsed = json.loads(text)
    result: dict[str, Any] = relaxed(parsed)
    return result


def rows(topic: str, record_key: Any, value: Any) -> tuple[Any, Any]:
    """``(key, value)`` of a decoded record, a MongoDB one turned into rows (see the module
    docstring); any other record is returned as it is.

    ``value`` may be the ``{"schema", "payload"}`` wrapper; the payload is converted in place.
    """
    if value is None:
        return record_key, None
    envelope = value.get("payload", value) if isinstance(value, dict) else None
    if not isinstance(envelope, dict):
        return record_key, value
    source = envelope.get("source")
    if not isinstance(source, dict) or source.get("connector") != "mongodb":
        return record_key, value
    # Sinks find a record's table by source.schema and source.table, which Debezium's MongoDB
    # source block names db and collection.
    source.setdefault("schema", source.get("db"))
    source.setdefault("table", source.get("collection"))
    for image in ("before", "after"):
        text = envelope.get(image)
        if isinstance(text, str):
            envelope[image] = document(text)
    return record_key, value
