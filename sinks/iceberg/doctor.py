"""``cdc doctor`` for the Iceberg sink: the catalog answers, pyiceberg is a supported version,
the sink may create tables in its namespace (a probe table is created and dropped), and it may
set the namespace's properties, where it stores its consistent position (a probe property is
set and removed; a refusal is a warning: the sink works, and stores no position)."""

from __future__ import annotations

import uuid

import pyiceberg
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from cdc.contracts.checks import Check, failed, passed, warned
from sinks.iceberg.config import IcebergSinkConfig
from sinks.iceberg.sink import open_catalog

MIN_VERSION = (0, 9)


def doctor(config: IcebergSinkConfig, pipeline_name: str) -> list[Check]:
    """``reachable``, ``version``, ``permitted`` and ``position``, each ok or with its fix."""
    where = config.where()
    try:
        catalog = open_catalog(config)
        namespace = config.namespace_for(pipeline_name)
        catalog.create_namespace_if_not_exists(namespace)
    except Exception as exc:  # pyiceberg, SQLAlchemy, HTTP: no common root
        fix = "start the catalog, or correct the sink's catalog properties (uri, credentials)"
        return [failed("reachable", config.scrub(f"{where}: {exc}"), fix)]
    checks = [passed("reachable", f"{where} answers; namespace {namespace} exists"), _version()]
    probe = (namespace, f"cdc_doctor_{uuid.uuid4().hex[:8]}")
    try:
        catalog.create_table(probe, Schema(NestedField(1, "id", LongType(), required=False)))
        catalog.drop_table(probe)
    except Exception as exc:
        fix = f"let the catalog user create and drop tables in namespace {namespace}"
        checks.append(failed("permitted", config.scrub(str(exc)), fix))
    else:
        checks.append(passed("permitted", f"tables can be created in namespace {namespace}"))
    checks.append(_position(config, catalog, namespace))
    return checks


def _position(config: IcebergSinkConfig, catalog: Catalog, namespace: str) -> Check:
    """The sink may set its namespace's properties (its stored consistent position)."""
    probe = f"cdc.doctor.{uuid.uuid4().hex[:8]}"
    try:
        catalog.update_namespace_properties(namespace, updates={probe: "probe"})
        catalog.update_namespace_properties(namespace, removals={probe})
    except Exception as exc:  # pyiceberg, SQLAlchemy, HTTP: no common root
        fix = (
            f"let the catalog user update the properties of namespace {namespace}: the sink "
            "stores its consistent position there (docs/sinks/iceberg.md), and stores none "
            "without it"
        )
        return warned("position", config.scrub(str(exc)), fix)
    return passed("position", f"namespace {namespace} takes the sink's consistent position")


def _version() -> Check:
    found = tuple(int(p) for p in pyiceberg.__version__.split(".")[:2])
    if found < MIN_VERSION:
        fix = 'pip install "cdc-connectors[iceberg]" (pyiceberg 0.9 to 0.12)'
        return failed("version", f"pyiceberg {pyiceberg.__version__} is older than 0.9", fix)
    return passed("version", f"pyiceberg {pyiceberg.__version__}")
