"""What a ``cdc`` command that only reads a pipeline's file imports: the configs, not the
client libraries nor the runtime behind them.

Each plugin package imports its implementation when first used (:mod:`cdc.support.lazy`), and
each plugin imports its sink or source inside the methods that run it. Before, ``cdc validate``
of a pipeline with a PostgreSQL source and a DuckDB and a Redis sink imported 747 modules and
took 1.5 s of CPU (2026-12-07), and every ``cdc status``, ``cdc wait`` or ``cdc drop`` paid the
same. A plugin module that imports its client at the top again fails here, by name.

Run in a fresh interpreter: this process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PIPELINE = """\
version: 1
name: shop
source: {type: postgres, dsn: "postgresql://h/db", tables: [public.t]}
log: {type: embedded, path: log}
sinks:
  - {name: wh, type: duckdb, path: out/wh.duckdb}
  - {name: cache, type: redis, url: "redis://localhost:6379/0"}
  - {name: idx, type: search, path: out/idx}
  - {name: pg, type: postgres, dsn: "postgresql://h/other"}
  - {name: os, type: opensearch, url: "http://localhost:9200"}
  - name: hook
    type: http
    url: "http://localhost:8080/hook"
    secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
  - {name: lake, type: iceberg, catalog: {uri: "sqlite:///out/catalog.db"}, warehouse: out/lake}
  - {name: files, type: jsonl, path: out/files}
"""

MONGO_PIPELINE = """\
version: 1
name: shop
source: {type: mongodb, dsn: "mongodb://h/?replicaSet=rs0", tables: [shop.orders]}
log: {type: embedded, path: log}
sinks:
  - {name: files, type: jsonl, path: out/files}
"""

#: Top-level packages, or modules, none of which reading a pipeline's file may import.
NOT_FOR_A_FILE = (
    "duckdb",
    "tantivy",
    "opensearchpy",
    "httpx",
    "pyiceberg",
    "pyarrow",
    "pymongo",
    "confluent_kafka",
    "cdc.runtime",
    "cdc.log.embedded",
    "cdc.metrics",
    "connectors.postgres.replication",
    "connectors.postgres.snapshot",
    "connectors.postgres.pgoutput",
    "connectors.mongodb.source",
    "sinks.duckdb.sink",
    "sinks.redis.sink",
    "sinks.search.sink",
    "sinks.postgres.sink",
)

PROBE = """
import json, sys
from pathlib import Path
from cdc.config.pipeline import parse
pipeline = parse(Path(sys.argv[1]).read_text())
print(json.dumps({"sinks": [s.type for s in pipeline.sinks], "modules": sorted(sys.modules)}))
"""


def _imported(tmp_path: Path, text: str) -> tuple[list[str], list[str]]:
    file = tmp_path / "pipeline.yaml"
    file.write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(file)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout)
    return report["sinks"], report["modules"]


def _offending(modules: list[str]) -> list[str]:
    return [
        m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_FOR_A_FILE)
    ]


def test_reading_a_file_with_every_sink_imports_no_client_nor_runtime(tmp_path: Path) -> None:
    sinks, modules = _imported(tmp_path, PIPELINE)
    assert sinks == [
        "duckdb",
        "redis",
        "search",
        "postgres",
        "opensearch",
        "http",
        "iceberg",
        "jsonl",
    ]
    assert _offending(modules) == []
    # The configs themselves were read through the plugins (each package's config module).
    assert {"sinks.duckdb.config", "sinks.iceberg.config", "sinks.http.config"} <= set(modules)


def test_reading_a_mongodb_file_imports_no_driver(tmp_path: Path) -> None:
    _, modules = _imported(tmp_path, MONGO_PIPELINE)
    assert _offending(modules) == []
    assert "connectors.mongodb.config" in modules
