"""``cdc doctor`` for the PostgreSQL source: what the server, the role and the tables must be
for a pipeline to start and to keep streaming, each check ok or the exact fix.

Everything is read on one ordinary connection, from the catalog and ``current_setting``; nothing
is created or changed. Statements shown as fixes are composed with :mod:`psycopg.sql` like the
ones the source runs, so they can be pasted as they are. The DSN appears only redacted.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from cdc.config.pipeline import redact_url
from cdc.contracts.checks import Check, failed, passed, warned
from cdc.contracts.errors import SourceError
from connectors.postgres.catalog import Catalog, Query
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.doctor.failover import Standby, failover_checks, standby_check
from connectors.postgres.doctor.filters import filter_checks
from connectors.postgres.doctor.tables import TableFacts, publication_checks, table_checks

#: The server versions the source is tested on.
MIN_VERSION, MAX_VERSION = 140000, 189999

#: Roles whose members a managed service lets replicate without the REPLICATION attribute.
_MANAGED_REPLICATION_ROLES = ("rds_replication", "rds_superuser", "azure_pg_admin")

_SERVER = sql.SQL(
    "SELECT current_setting('server_version_num')::int, current_setting('server_version'),"
    " current_setting('wal_level'), current_setting('max_replication_slots')::int,"
    " current_setting('max_wal_senders')::int,"
    " current_setting('max_slot_wal_keep_size', true),"
    " (SELECT count(*) FROM pg_replication_slots)::int,"
    " (SELECT count(*) FROM pg_stat_replication)::int,"
    " current_database()::text, pg_is_in_recovery(),"
    " current_setting('hot_standby_feedback'), current_setting('primary_slot_name')"
)

_ROLE = sql.SQL(
    "SELECT r.rolname::text, r.rolreplication, r.rolsuper,"
    " ARRAY(SELECT g.rolname::text FROM pg_roles g WHERE g.rolname = ANY(%s)"
    "  AND pg_has_role(r.oid, g.oid, 'MEMBER')),"
    " has_database_privilege(current_database(), 'CREATE')"
    " FROM pg_roles r WHERE r.rolname = current_user"
)

_SLOT = sql.SQL(
    "SELECT slot_type::text, plugin::text, database::text, active, active_pid, wal_status::text,"
    " restart_lsn::text,"
    " CASE WHEN pg_is_in_recovery() OR restart_lsn IS NULL THEN NULL"
    "  ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 END"
    " FROM pg_replication_slots WHERE slot_name = %s"
)

_INACTIVE_SLOTS = sql.SQL(
    "SELECT slot_name::text FROM pg_replication_slots WHERE NOT active ORDER BY slot_name"
)


@dataclass(frozen=True, slots=True)
class Server:
    """What ``current_setting`` and the slot views say about the server."""

    version_num: int
    version: str
    wal_level: str
    max_slots: int
    max_senders: int
    keep_size: str | None
    slots_used: int
    senders_used: int
    database: str
    in_recovery: bool
    hot_standby_feedback: str
    primary_slot_name: str


@dataclass(frozen=True, slots=True)
class Role:
    """The connected role and what it may do."""

    name: str
    replication: bool
    superuser: bool
    managed_roles: tuple[str, ...]
    may_create_in_db: bool


@dataclass(frozen=True, slots=True)
class Slot:
    """A row of ``pg_replication_slots``, with the WAL it holds back (``None`` on a standby)."""

    slot_type: str
    plugin: str | None
    database: str | None
    active: bool
    active_pid: int | None
    wal_status: str | None
    restart_lsn: str | None
    retained_bytes: int | None


def doctor(config: PostgresSourceConfig, pipeline_name: str) -> list[Check]:
    """Every check of the PostgreSQL source of ``pipeline_name``, in the order a start meets
    them: the server, the role, the tables, the publication, the slot."""
    dsn = config.dsn.get_secret_value()
    where = redact_url(dsn)
    try:
        catalog = Catalog(dsn, where, config.connect_timeout_s)
    except SourceError as exc:
        fix = "check source.dsn, that the server is up, and that pg_hba.conf admits the role"
        return [failed("connect", str(exc), fix)]
    try:
        return _checks(catalog, config, pipeline_name, where)
    finally:
        catalog.close()


def _checks(
    catalog: Catalog, config: PostgresSourceConfig, pipeline_name: str, where: str
) -> list[Check]:
    server = Server(*catalog.rows(_SERVER)[0])
    role = _role(catalog)
    slot_name = config.slot_name(pipeline_name)
    slot = _slot(catalog, slot_name)
    checks = [
        passed("connect", f"{where} as role {role.name}, database {server.database}"),
        _version(server),
        _wal_level(server),
        _slots_free(catalog, server, slot),
        _senders_free(server, slot),
        _keep_size(server),
        _role_check(catalog, role),
    ]
    tables = [TableFacts.read(catalog, schema, table) for schema, table in config.table_pairs()]
    for facts in tables:
        checks += table_checks(catalog, facts, role.name, config.key_columns.get(facts.name))
        checks += filter_checks(catalog, facts, config.table_entry(facts.name))
    publication = config.publication_name(pipeline_name)
    may = (role.superuser, role.may_create_in_db, server.in_recovery)
    checks += publication_checks(catalog, publication, tables, role.name, *may)
    checks += _slot_checks(slot_name, slot, server)
    checks += failover_checks(
        catalog, slot_name, server.version_num, server.in_recovery, config.slot_failover
    )
    if not server.in_recovery:
        return checks
    standby = Standby(server.version_num, server.hot_standby_feedback, server.primary_slot_name)
    return [*checks[:2], standby_check(standby), *checks[2:]]


def _statement(catalog: Catalog, query: Query) -> str:
    return query.as_string(catalog.conn)


def _role(catalog: Catalog) -> Role:
    name, replication, superuser, managed, create = catalog.rows(
        _ROLE, (list(_MANAGED_REPLICATION_ROLES),)
    )[0]
    return Role(name, replication, superuser, tuple(managed), create)


def _slot(catalog: Catalog, name: str) -> Slot | None:
    found = catalog.rows(_SLOT, (name,))
    return Slot(*found[0]) if found else None


def _version(server: Server) -> Check:
    detail = f"PostgreSQL {server.version}"
    if server.version_num < MIN_VERSION:
        return failed("server version", detail, "upgrade the server to PostgreSQL 14 or later")
    if server.version_num > MAX_VERSION:
        return warned("server version", f"{detail}: newer than 18, the last version tested")
    return passed("server version", detail)


def _conf(setting: str, value: str | int, restart: bool = True) -> str:
    """The fix for a server setting: the postgresql.conf line, or the statement that writes it."""
    then = "restart the server" if restart else "reload (SELECT pg_reload_conf();)"
    return (
        f"set {setting} = {value} in postgresql.conf "
        f"(or ALTER SYSTEM SET {setting} = {value};), then {then}"
    )


def _wal_level(server: Server) -> Check:
    if server.wal_level == "logical":
        return passed("wal_level", "logical")
    detail = f"{server.wal_level}: logical decoding is off, no logical slot can be created"
    return failed("wal_level", detail, _conf("wal_level", "logical"))


def _slots_free(catalog: Catalog, server: Server, slot: Slot | None) -> Check:
    """A slot of our own counts as present: only a first start needs a free one."""
    need = 0 if slot is not None else 1
    free = server.max_slots - server.slots_used
    detail = f"{server.slots_used} of {server.max_slots} in use"
    detail += ", this pipeline's among them" if slot is not None else ", this pipeline needs 1"
    if free >= need:
        return passed("max_replication_slots", detail)
    fix = _conf("max_replication_slots", server.slots_used + need)
    unused = [row[0] for row in catalog.rows(_INACTIVE_SLOTS)]
    if unused:
        drops = sql.SQL(" ").join(
            sql.SQL("SELECT pg_drop_replication_slot({});").format(sql.Literal(name))
            for name in unused
        )
        fix += f"; or drop an unused slot ({', '.join(unused)}): {_statement(catalog, drops)}"
    return failed("max_replication_slots", detail, fix)


def _senders_free(server: Server, slot: Slot | None) -> Check:
    """The pipeline's own walsender, while it streams, is already counted.

    Counted in ``pg_stat_replication``, which lists every WAL sender to any role (details only
    to privileged ones); ``pg_stat_activity`` hides other roles' backend types.
    """
    need = 0 if slot is not None and slot.active else 1
    free = server.max_senders - server.senders_used
    detail = f"{server.senders_used} of {server.max_senders} WAL senders in use"
    if free >= need:
        return passed("max_wal_senders", detail)
    return failed("max_wal_senders", detail, _conf("max_wal_senders", server.senders_used + need))


def _keep_size(server: Server) -> Check:
    value = server.keep_size
    if value is None:
        return passed("max_slot_wal_keep_size", "not available on this server")
    if value == "-1":
        detail = (
            "-1: slots retain WAL without bound; a stopped or stalled pipeline can fill the "
            "server's disk"
        )
        fix = _conf("max_slot_wal_keep_size", "'64GB'", restart=False)
        return warned("max_slot_wal_keep_size", detail, fix)
    detail = f"{value}: a slot further behind than this loses its WAL and must re-snapshot"
    return passed("max_slot_wal_keep_size", detail)


def _role_check(catalog: Catalog, role: Role) -> Check:
    name = f"role {role.name}: REPLICATION"
    if role.superuser:
        return passed(name, "superuser")
    if role.replication:
        return passed(name, "has the REPLICATION attribute")
    grant = sql.SQL("ALTER ROLE {} WITH REPLICATION;").format(sql.Identifier(role.name))
    fix = f"a superuser must run: {_statement(catalog, grant)}"
    if role.managed_roles:
        detail = (
            f"member of {', '.join(role.managed_roles)}, but the source's start check asks "
            "for the REPLICATION attribute or superuser"
        )
        return failed(name, detail, fix)
    return failed(name, "neither REPLICATION nor superuser: it cannot stream changes", fix)


def _slot_checks(name: str, slot: Slot | None, server: Server) -> list[Check]:
    label = f"slot {name}"
    if slot is None:
        return [passed(label, "does not exist yet: cdc run creates it")]
    state = _slot_state(label, name, slot, server)
    if slot.retained_bytes is None:
        return [state]
    retained = f"{pretty_bytes(slot.retained_bytes)} of WAL held since {slot.restart_lsn}"
    return [state, passed(f"{label}: retained WAL", retained)]


def _slot_state(label: str, name: str, slot: Slot, server: Server) -> Check:
    drop = sql.SQL("SELECT pg_drop_replication_slot({});").format(sql.Literal(name))
    drop_text = drop.as_string(None)
    if slot.slot_type != "logical" or slot.plugin != "pgoutput":
        detail = f"a {slot.slot_type} slot for plugin {slot.plugin!r}, not a pgoutput slot"
        return failed(label, detail, f"choose another source.slot, or drop it: {drop_text}")
    if slot.database != server.database:
        detail = f"belongs to database {slot.database!r}, not {server.database!r}"
        return failed(label, detail, f"choose another source.slot, or drop it: {drop_text}")
    holder = f"active in process {slot.active_pid}" if slot.active else "inactive"
    detail = f"pgoutput, {holder}, wal_status {slot.wal_status}"
    if slot.wal_status == "lost":
        fix = "drop it (cdc drop FILE) and start again: the pipeline re-snapshots"
        return failed(label, detail + ": the WAL it needs was removed", fix)
    if slot.wal_status == "unreserved":
        fix = "let the pipeline catch up now, or raise max_slot_wal_keep_size"
        return warned(label, detail + ": its WAL goes at the next checkpoint", fix)
    return passed(label, detail)


def pretty_bytes(count: int) -> str:
    """``1536`` -> ``1.5 kB``; PostgreSQL's units (``pg_size_pretty``: powers of 1024)."""
    size = float(count)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if abs(size) < 1024 or unit == "TB":
            return f"{count} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
