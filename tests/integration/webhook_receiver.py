"""A real webhook receiver for the HTTP sink's tests and bench: an HTTP server in the test
process (``ThreadingHTTPServer`` in a thread) that verifies every request's signature with the
function ``docs/sinks/http.md`` documents (read from the page, so the documented code is the one
that runs), fails on purpose when told to, records every delivery, and keeps a store that
applies records by source position the way the docs tell a receiver to.

Faults, taken in order, one per request (:meth:`Receiver.plan`): ``"ok"`` (none), ``"500"``,
``"503"``, ``"429:N"`` (``Retry-After: N`` seconds), ``"429-date:N"`` (an HTTP date N s ahead),
``"401"``, ``"timeout"`` (the records are taken, then the answer waits past the client's
timeout: delivered but not acknowledged), ``"drop"`` (the connection is closed unanswered),
``"hold"`` (the records are taken, :attr:`Receiver.holding` is set, and the answer waits for
:attr:`Receiver.release`: a test kills the sender mid-request).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

DOC = Path(__file__).resolve().parents[2] / "docs" / "sinks" / "http.md"
BLOCK = re.compile(r"## Verifying a request.*?```python\n(?P<code>.*?)```", re.S)


def documented_verify() -> Callable[..., bool]:
    """``verify`` exactly as the docs' block defines it."""
    found = BLOCK.search(DOC.read_text())
    assert found is not None, "docs/sinks/http.md lost its verification block"
    scope: dict[str, Any] = {}
    exec(compile(found["code"], str(DOC), "exec"), scope)  # the doc's own code, run as is
    verify: Callable[..., bool] = scope["verify"]
    return verify


@dataclass
class Request:
    """One request as received: its ``webhook-id``, the records' ids, the answer, when."""

    message_id: str
    ids: list[str]
    status: int
    at: float


@dataclass
class Receiver:
    """Starts at once; :meth:`close` stops it."""

    secret: str
    hang_s: float = 1.0
    faults: list[str] = field(default_factory=list)
    down: bool = False  # every request answered 503
    lean: bool = False  # the bench's: verify and count, keep nothing per record
    taken: int = 0  # records taken (answered 2xx)
    refuse: Callable[[dict[str, Any]], bool] | None = None  # a record answered 422
    requests: list[Request] = field(default_factory=list)
    received: Counter[str] = field(default_factory=Counter)  # record id -> deliveries
    content: dict[str, bytes] = field(default_factory=dict)  # record id -> its JSON
    conflicts: list[str] = field(default_factory=list)  # an id seen with other content
    bad_signatures: int = 0
    pings: int = 0
    store: dict[tuple[str, str], tuple[tuple[Any, ...], Any]] = field(default_factory=dict)
    truncated: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.held: list[str] = []  # the ids of the held requests' records
        self.verify = documented_verify()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hooks"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def plan(self, *faults: str) -> None:
        with self.lock:
            self.faults.extend(faults)

    def rows(self, table: str) -> dict[str, Any]:
        """The store's rows of ``table`` (``schema.table``), by key as JSON text."""
        with self.lock:
            return {k: row for (t, k), (_, row) in self.store.items() if t == table and row}

    def handle(self, headers: Any, body: bytes) -> tuple[int, dict[str, str]]:
        """The answer to one request: ``(status, headers)``; ``-1`` drops the connection."""
        if not self.verify(self.secret, headers, body):
            with self.lock:
                self.bad_signatures += 1
            return 400, {}
        document = orjson.loads(body)
        records = document["records"]
        if self.lean:
            with self.lock:
                self.taken += len(records)
            return 200, {}
        fault = self._next_fault()
        status, extra = self._fault_answer(fault, document, records)
        with self.lock:
            self.requests.append(
                Request(headers["webhook-id"], [r["id"] for r in records], status, time.time())
            )
        return status, extra

    def _next_fault(self) -> str | None:
        with self.lock:
            if self.down:
                return "503"
            return self.faults.pop(0) if self.faults else None

    def _fault_answer(
        self, fault: str | None, document: dict[str, Any], records: list[dict[str, Any]]
    ) -> tuple[int, dict[str, str]]:
        if fault in (None, "ok", "timeout", "hold"):
            if self.refuse is not None and any(self.refuse(r) for r in records):
                return 422, {}
            self._take(document, records)
            if fault == "timeout":  # taken, but the answer comes after the client gave up
                threading.Event().wait(self.hang_s)
            if fault == "hold":
                self.held.extend(r["id"] for r in records)
                self.holding.set()
                self.release.wait(60)
            return 200, {}
        if fault == "drop":
            return -1, {}
        code, _, seconds = fault.partition(":")
        if code == "429-date":
            return 429, {"Retry-After": formatdate(time.time() + float(seconds), usegmt=True)}
        return int(code), ({"Retry-After": seconds} if seconds else {})

    def _take(self, document: dict[str, Any], records: list[dict[str, Any]]) -> None:
        prefix = f"{document['pipeline']}."
        with self.lock:
            self.taken += len(records)
            if not records:
                self.pings += 1
            for record in records:
                data = orjson.dumps(record)
                rid = record["id"]
                if self.content.setdefault(rid, data) != data and not _twin(record, rid, self):
                    self.conflicts.append(rid)
                self.received[rid] += 1
                self._apply(prefix, record)

    def _apply(self, prefix: str, record: dict[str, Any]) -> None:
        """Apply by position, as the docs tell a receiver: a change not newer than what the
        key holds is ignored; a delete is kept (its position) so no older change revives it."""
        table, op, key, row = _change(prefix, record)
        position = tuple(record["position"] or ())  # none: a legacy record, applied as is
        if op == "t":
            self.truncated[table] = position
            for (t, k), (held, _) in list(self.store.items()):
                if t == table and held < position:
                    del self.store[t, k]
            return
        if position <= self.truncated.get(table, ()):
            return
        slot = (table, orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode())
        held = self.store.get(slot)
        if held is None or held[0] < position or not position:
            self.store[slot] = (position, None if op == "d" else row)


def _twin(record: dict[str, Any], rid: str, receiver: Receiver) -> bool:
    """``record`` and the one received first under ``rid`` are a delete and its tombstone
    (``debezium``: value null), in either order: the one case of an id with other content."""
    first = orjson.loads(receiver.content[rid])
    if "value" not in record or first["key"] != record["key"]:
        return False
    values = (first["value"], record["value"])
    return None in values and any(v is not None and v.get("op") == "d" for v in values)


def _change(prefix: str, record: dict[str, Any]) -> tuple[str, str, Any, Any]:
    """``(table, op, key, row)`` of a record in either format; a tombstone is a delete."""
    if "value" not in record:  # format: rows
        return record["table"], record["op"], record["key"], record["row"]
    value = record["value"]
    table = record["topic"].removeprefix(prefix)
    if value is None:
        return table, "d", record["key"], None
    return table, value["op"], record["key"], value.get("after")


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the sink's pooled client uses it

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            status, extra = receiver.handle(self.headers, body)
            if status < 0:
                self.close_connection = True
                return
            try:
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()
            except OSError:  # the client gave up first ("timeout"): nothing to answer
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the tests read the receiver's records, not its access log

    return Handler
