"""A child process for the PostgreSQL sink's crash test: applies batch 1, says ``ready``, then
applies batch 2 when told to on stdin (the test kills it while batch 2 waits for a lock).

Run as ``python -m tests.integration.postgres_sink_child DSN``.
"""

from __future__ import annotations

import sys

from cdc.contracts.events import Op
from tests.integration.duckdb_kit import item
from tests.integration.postgres_sink_kit import Harness


def main(dsn: str) -> None:
    harness = Harness(dsn)
    harness.apply(*(item(Op.CREATE, k, 10 + k, f"n{k}", k) for k in range(1, 4)))
    print("ready", flush=True)
    sys.stdin.readline()
    harness.apply(
        item(Op.UPDATE, 1, 20, "changed", 10),
        item(Op.DELETE, 2, 21),
        item(Op.CREATE, 4, 22, "n4", 4),
    )
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
