"""The transform conformance kit: what every transform (``cdc.transforms`` plugin) must do.

A transform author subclasses :class:`TransformConformance` in a test module (the class name
must start with ``Test`` so pytest collects it) and implements two methods::

    class TestMyTransform(TransformConformance):
        config_model = MyConfig                  # optional: checks its config model
        config = {"type": "mine", "field": "x"}  # a valid section of the pipeline file

        def make_transform(self, context):       # a NEW transform each call
            return MyPlugin.create(MyConfig.model_validate(self.config), context)

        def sample_events(self):                 # events it should see: every op it handles
            return [make_event(1), make_event(2, Op.DELETE), ...]

The kit builds the transform with a :class:`~cdc.transforms.TransformContext` for pipeline
``kit`` listing the sample events' tables (:meth:`TransformConformance.tables`), and checks:

* ``apply`` returns a :class:`~cdc.contracts.events.ChangeEvent`, a list or tuple of them, or
``None``;
* it never changes the event it is given (rows, :class:`~cdc.envelope.encode.EncodedRow` rows and
  their JSON, the key, the source block, everything), and is deterministic;
* the events it returns keep their ``source`` position and sequence, which sinks compare to
  skip replays (a changed one would make a sink drop or reorder changes);
* they encode through :func:`cdc.envelope.encode.to_records`, without and with ``schemas.enable``,
to
  the topic of :attr:`~cdc.contracts.events.ChangeEvent.topic_table`, with their key and rows, and
  Connect schemas named after that topic that describe every field of the rows;
* ``table()`` names the table ``apply`` sends the events to, and ``schema()`` of each table's
  shape (:meth:`TransformConformance.sample_schemas`: by default derived from the sample
  events) names that table and covers every field of the rows and the key it returns;
* its config model (when given) rejects unknown keys, and the fingerprint a pipeline stores
  of it (:meth:`~cdc.transforms.TransformChain.fingerprint`) is the same whatever the order of
  the section's keys.

pytest is only imported by the check that may skip, so this module (and :mod:`cdc.testing`)
imports without it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import orjson
from pydantic import ValidationError

from cdc.contracts.events import ChangeEvent, Op, topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.envelope import encode as envelope
from cdc.envelope.json_rows import EncodedRow
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.support.logging import get_logger
from cdc.transforms.base import Transform, TransformConfig, TransformContext, topic_table_id
from cdc.transforms.chain import TransformChain

PIPELINE = "kit"
WITH_SCHEMAS = EnvelopeOptions.model_validate({"schemas.enable": True})


def snapshot(event: ChangeEvent) -> dict[str, Any]:
    """Everything of ``event``, copied: equal before and after a transform saw it, or the
    transform changed it. An :class:`EncodedRow` counts with its JSON and its values."""
    return {
        "op": event.op,
        "key": copy.deepcopy(event.key),
        "before": _row(event.before),
        "after": _row(event.after),
        "source": dataclasses.asdict(event.source),
        "encoded": event.encoded,
        "fields": copy.deepcopy(event.fields),
        "transaction": copy.deepcopy(event.transaction),
        "connect": event.connect,
        "destination": event.destination,
    }


def _row(row: Mapping[str, Any] | None) -> Any:
    if row is None:
        return None
    if isinstance(row, EncodedRow):
        return ("encoded", bytes(row.json), copy.deepcopy(dict(row.values_dict())))
    return ("row", type(row).__name__, copy.deepcopy(dict(row)))


def returned(result: Any) -> list[ChangeEvent]:
    """The events of an ``apply`` result.

    Raises:
        AssertionError: the result is not a ChangeEvent, a list or tuple of them, or None.
    """
    if result is None:
        return []
    if isinstance(result, ChangeEvent):
        return [result]
    assert isinstance(result, list | tuple), (
        f"apply returned {type(result).__name__}: a transform returns a ChangeEvent, "
        "a list or tuple of them, or None"
    )
    for item in result:
        assert isinstance(item, ChangeEvent), f"apply returned a {type(item).__name__} in a list"
    return list(result)


def derived_schema(events: Sequence[ChangeEvent]) -> TableSchema:
    """A table's shape as its events show it: every field of their rows (typed ``text``,
    the key's as key columns), in the order they first appear."""
    first = events[0]
    names: dict[str, None] = {}
    keys: dict[str, None] = {}
    for event in events:
        keys.update(dict.fromkeys(event.key))
        for row in (event.before, event.after):
            names.update(dict.fromkeys(row or ()))
    names.update(keys)
    columns = tuple(
        Column(name, "text", key=name in keys, nullable=name not in keys) for name in names
    )
    src = first.source
    return TableSchema(src.connector, src.schema, src.table, columns, position=src.position)


class TransformConformance:
    """Checks every transform passes; see the module docstring for how to use it."""

    #: The transform's config model (``None``: the config checks are skipped).
    config_model: ClassVar[type[TransformConfig] | None] = None
    #: A valid section of the pipeline file for the transform (with its ``type``).
    config: ClassVar[Mapping[str, Any]] = {}

    # -- to implement ------------------------------------------------------------------------

    def make_transform(self, context: TransformContext) -> Transform:
        raise NotImplementedError

    def sample_events(self) -> Sequence[ChangeEvent]:
        raise NotImplementedError

    # -- optional ----------------------------------------------------------------------------

    def tables(self) -> tuple[str, ...]:
        """The tables the context lists: by default, those of the sample events."""
        return tuple(dict.fromkeys(e.table_id for e in self.sample_events()))

    def sample_schemas(self) -> Sequence[TableSchema]:
        """One shape per table of the sample events; by default derived from their rows."""
        by_table: dict[str, list[ChangeEvent]] = {}
        for event in self.sample_events():
            by_table.setdefault(event.table_id, []).append(event)
        return [derived_schema(events) for events in by_table.values()]

    # -- plumbing ----------------------------------------------------------------------------

    def context(self) -> TransformContext:
        return TransformContext(PIPELINE, get_logger(transform="kit"), self.tables())

    def transform(self) -> Transform:
        return self.make_transform(self.context())

    def applied(self) -> list[tuple[ChangeEvent, list[ChangeEvent]]]:
        """Each sample event with what the transform returned for it."""
        transform = self.transform()
        return [(e, returned(transform.apply(e))) for e in self.sample_events()]

    # -- the checks --------------------------------------------------------------------------

    def test_kit_has_samples(self) -> None:
        assert self.sample_events(), "sample_events() returned no events to check"

    def test_kit_returns_events_a_list_or_none(self) -> None:
        transform = self.transform()
        for event in self.sample_events():
            returned(transform.apply(event))

    def test_kit_does_not_change_the_event_it_is_given(self) -> None:
        transform = self.transform()
        for event in self.sample_events():
            before = snapshot(event)
            out = returned(transform.apply(event))
            assert snapshot(event) == before, f"apply changed the {event.op.value} event given"
            for result in out:
                snapshot(result)  # reading a returned event leaves the given one alone too
            assert snapshot(event) == before, f"apply changed the {event.op.value} event given"

    def test_kit_is_deterministic(self) -> None:
        first, second = self.transform(), self.transform()
        for event in self.sample_events():
            once = [snapshot(e) for e in returned(first.apply(event))]
            again = [snapshot(e) for e in returned(first.apply(event))]
            fresh = [snapshot(e) for e in returned(second.apply(event))]
            assert once == again == fresh, f"two runs over one {event.op.value} event differ"

    def test_kit_keeps_source_position_and_sequence(self) -> None:
        for event, out in self.applied():
            for result in out:
                got = (result.source.position, result.source.sequence)
                want = (event.source.position, event.source.sequence)
                assert got == want, f"source (position, sequence) {want} became {got}"

    def test_kit_events_encode_without_schemas(self) -> None:
        for _, out in self.applied():
            for result in out:
                self._check_records(result, READABLE)

    def test_kit_events_encode_with_schemas(self) -> None:
        for _, out in self.applied():
            for result in out:
                self._check_records(result, WITH_SCHEMAS)

    def test_kit_table_agrees_with_apply(self) -> None:
        transform = self.transform()
        table = getattr(transform, "table", None)
        for event, out in self.applied():
            named = topic_table_id(event) if table is None else table(topic_table_id(event))
            for result in out:
                assert topic_table_id(result) == named, (
                    f"apply sent a change of {event.table_id} to {topic_table_id(result)}, "
                    f"table() says {named}"
                )

    def test_kit_schema_covers_the_rows_it_returns(self) -> None:
        transform = self.transform()
        shape_of = getattr(transform, "schema", None)
        shapes = {f"{s.schema}.{s.table}": s for s in self.sample_schemas()}
        for event, out in self.applied():
            given = shapes.get(event.table_id)
            if given is None or not out:
                continue
            shaped = given if shape_of is None else shape_of(given)
            for result in out:
                self._check_shape(event, result, given, shaped)

    def test_kit_config_model_rejects_unknown_keys(self) -> None:
        model = self._model()
        try:
            model.model_validate({**self.config, "no_such_option_of_the_kit": 1})
        except ValidationError as exc:
            assert any(e["type"] == "extra_forbidden" for e in exc.errors()), exc
        else:
            raise AssertionError(f"{model.__name__} accepts keys it does not know")

    def test_kit_fingerprint_is_stable(self) -> None:
        model = self._model()
        section = dict(self.config)
        reordered = dict(reversed(list(section.items())))
        prints = {
            self._chain(model.model_validate(section)).fingerprint(),
            self._chain(model.model_validate(section)).fingerprint(),
            self._chain(model.model_validate(reordered)).fingerprint(),
        }
        assert len(prints) == 1, "the fingerprint of one config changes between builds"

    # -- helpers -----------------------------------------------------------------------------

    def _model(self) -> type[TransformConfig]:
        if self.config_model is None or not self.config:
            import pytest

            pytest.skip("no config_model and config given")
        assert self.config_model is not None
        return self.config_model

    def _chain(self, config: TransformConfig) -> TransformChain:
        return TransformChain([("transforms[0] (kit)", config, self.transform())])

    def _check_records(self, event: ChangeEvent, options: EnvelopeOptions) -> None:
        topic = topic_name(PIPELINE, *event.topic_table)
        records = envelope.to_records(event, PIPELINE, now_ms=0, options=options)
        assert records, "an event encodes to no record"
        for record in records:
            assert record.topic == topic, f"record went to {record.topic}, not {topic}"
            key = envelope.decode(record.key)
            if event.op is Op.TRUNCATE:  # keyless, as Debezium's
                assert key is None, f"a truncate's key is {key!r}, not null"
                continue
            assert envelope.payload(key) == orjson.loads(envelope.dumps(event.key))
            if options.schemas_enable and key.get("schema") is not None:
                _covers(key["schema"], event.key, f"{topic}.Key")
        value = envelope.decode(records[0].value)
        payload = envelope.payload(value)
        assert payload["op"] == event.op.value
        for side in ("before", "after"):
            row = getattr(event, side)
            want = None if row is None else orjson.loads(envelope.dumps(row))
            assert payload[side] == want, f"the record's {side} is not the event's"
        if options.schemas_enable:
            assert value["schema"]["name"] == f"{topic}.Envelope", (
                f"the value schema is {value['schema']['name']!r} on topic {topic}"
            )
            for field in value["schema"]["fields"]:
                if field["field"] in ("before", "after") and isinstance(
                    payload[field["field"]], dict
                ):
                    _covers(field, payload[field["field"]], f"{topic}.Value")

    def _check_shape(
        self, event: ChangeEvent, result: ChangeEvent, given: TableSchema, shaped: TableSchema
    ) -> None:
        where = f"the {event.op.value} change of {event.table_id}"
        assert (shaped.schema, shaped.table) == result.topic_table, (
            f"schema() names {shaped.schema}.{shaped.table}, apply sent {where} to "
            f"{topic_table_id(result)}"
        )
        columns = {c.name for c in shaped.columns}
        for side in ("before", "after"):
            row = getattr(result, side)
            missing = sorted(set(row or ()) - columns)
            assert not missing, f"schema() lacks {missing} of {side} of {where}"
        if event.op is not Op.TRUNCATE and set(event.key) == set(given.key_columns):
            assert set(result.key) == set(shaped.key_columns), (
                f"the key of {where} has {sorted(result.key)}, schema() keys {shaped.key_columns}"
            )


def _covers(schema: Mapping[str, Any], row: Mapping[str, Any], name: str) -> None:
    """A struct schema named ``name`` that describes every field of ``row``."""
    assert schema.get("name") == name, f"schema named {schema.get('name')!r}, not {name!r}"
    fields = {f["field"] for f in schema.get("fields", ())}
    missing = sorted(set(row) - fields)
    assert not missing, f"the {name} schema lacks {missing}"
