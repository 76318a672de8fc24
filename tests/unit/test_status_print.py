"""What ``cdc status`` prints for a source's stored offsets: snapshot progress once, as a table.

No service is needed: the report is built from stored offsets only, as ``cdc status`` builds it
while the source is down, through the real MongoDB plugin and snapshot state code.
"""

from __future__ import annotations

import pytest

from cdc.cli.status import print_status
from cdc.metrics.snapshot_report import snapshot_report
from connectors.mongodb import snapshot
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.plugin import MongoSourcePlugin


def test_a_running_mongodb_snapshot_is_shown_once(capsys: pytest.CaptureFixture[str]) -> None:
    plan = [{"done": True, "marker": "range-one"}, {"done": False, "marker": "range-two"}]
    state = snapshot.new_state("s1", 7, "initial", {"shop.orders": plan})
    state["collections"]["shop.orders"]["rows"] = 1234
    entry = {"streams": {"shop": {"at": "2026-11-30T00:00:00Z"}}, "snapshot": state}
    offsets = {"mongodb": entry, **snapshot.mirror(entry)}
    config = MongoSourceConfig.model_validate(
        {"type": "mongodb", "dsn": "mongodb://localhost:1", "tables": ["shop.orders"]}
    )
    source = {"type": "mongodb", "offsets": offsets}
    source.update(MongoSourcePlugin.status(config, "p", offsets))
    assert "snapshot" in source  # the plugin's own view, for --json readers
    report = {
        "pipeline": "p",
        "log": "embedded",
        "source": source,
        "snapshot": snapshot_report(offsets),
        "topics": [],
        "sinks": [],
    }
    print_status(report)
    out = capsys.readouterr().out
    assert out.count("shop.orders") == 1  # the snapshot table's row, nothing else
    assert "1/2" in out and "1,234" in out
    assert "range-one" not in out and "ranges_done" not in out  # no raw progress
    assert "streams" in out  # the rest of the source's state is still shown
