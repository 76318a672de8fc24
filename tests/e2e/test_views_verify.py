"""``cdc verify`` of a live join view on PostgreSQL: the view's documents, compared with the
join of the source's rows by the range-digest comparer (both sides streamed from temporary
databases), are reported key by key once the view topic is tampered with."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson

from cdc.views import records as out
from cdc.views.join import canonical_key
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.views_kit import ViewReader, setup, source_join, write_pipeline


def test_verify_reports_a_views_missing_extra_and_different_documents(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    setup(pg_db, customers=3, orders=12, items=20)
    pipeline = write_pipeline(tmp_path, pg_db, redis_server.url, f"vv_{uuid.uuid4().hex[:8]}")
    reader = ViewReader(pipeline)
    view = reader.config.views[0]
    process = start_run(pipeline, tmp_path)
    log = tmp_path / "run.log"
    command = ("verify", str(pipeline), "--json", "--table", "views.order_docs")
    try:
        expected = source_join(pg_db, view)
        wait_for(lambda: reader.documents() == expected, 120, 0.1, process, log)
        verified = cdc(*command, cwd=tmp_path)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        changed = dict(expected[canonical_key({"id": 3})], note="tampered")
        extra = dict(expected[canonical_key({"id": 4})], id=999)
        with reader.log.begin() as tx:  # as a bug in the view would leave its topic
            for key, doc in ((3, changed), (5, None), (999, extra)):
                tx.append(
                    out.document_records(
                        reader.config.name, view, canonical_key({"id": key}), doc, (1 << 60, key)
                    )
                )
        verified = cdc(*command, cwd=tmp_path)
    finally:
        code, _ = stop(process, timeout=30)
    assert code == 0, log.read_text()[-3000:]
    assert verified.returncode == 1, verified.stdout + verified.stderr
    (report,) = orjson.loads(verified.stdout)
    assert report["state"] == "different"
    assert report["missing_in_sink"] == [{"id": 5}]
    assert report["extra_in_sink"] == [{"id": 999}]
    assert report["different"] == [{"id": 3}]
    assert report["source"]["count"] == len(expected)
    assert report["sink_rows"]["count"] == len(expected)  # one gone, one added
    assert report["source"]["checksum"] != report["sink_rows"]["checksum"]
