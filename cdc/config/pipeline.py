"""The pipeline file: YAML, version 1, validated by pydantic with every error reported at once.

Validation runs in layers so that one mistake does not hide another: the core model first (with
``source`` and each sink kept as raw mappings), then each plugin's own model on its section. Every
problem carries its YAML path, such as ``sinks[1].url``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from cdc.config.batch_bytes import BATCH_BYTES, BatchBytes
from cdc.config.checks import built_chain, cross_checks
from cdc.config.env import expand_env
from cdc.config.sections import plugin_section, pydantic_problems, transform_sections
from cdc.contracts import plugins
from cdc.contracts.errors import ConfigError
from cdc.envelope.options import EnvelopeOptions
from cdc.support.redact import redact
from cdc.transforms import filters
from cdc.transforms.base import TransformConfig
from cdc.transforms.chain import TransformChain, build_chain
from cdc.transforms.filters import TableEntry
from cdc.transforms.masks import MIN_KEY_LENGTH

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(StrictModel):
    """Fields every source shares; a plugin's model extends it.

    ``tables`` holds each captured table as a :class:`~cdc.transforms.filters.TableEntry` (a plain
    name in the file becomes one with no filters); :attr:`table_names` lists their names, in order.
    ``mask_key`` keys the hash masks (a secret: never logged, never stored).
    """

    type: str
    tables: list[TableEntry] = Field(min_length=1)
    snapshot: Literal["initial", "never", "always", "when_needed"] = "initial"
    mask_key: SecretStr | None = Field(default=None, validate_default=True)

    @field_validator("tables", mode="before")
    @classmethod
    def _entries(cls, tables: Any) -> Any:
        if not isinstance(tables, list):
            return tables
        for table in tables:
            if isinstance(table, str):
                TableEntry.check_name(table)  # reported under source.tables, as it is written
        return [filters.entry(t) for t in tables]

    @field_validator("tables")
    @classmethod
    def _distinct(cls, tables: list[TableEntry]) -> list[TableEntry]:
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise ValueError("tables are listed more than once")
        return tables

    @field_validator("mask_key")
    @classmethod
    def _key_for_hashes(cls, key: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        hashed = [
            f"{t.name}.{column}"
            for t in info.data.get("tables") or []
            for column, spec in t.mask.items()
            if spec.type == "hash"
        ]
        if key is None and hashed:
            raise ValueError(
                f"is required by the hash masks of {', '.join(hashed)} (a secret: give it as "
                "${CDC_MASK_KEY}, e.g. from `openssl rand -hex 32`)"
            )
        if key is not None and len(key.get_secret_value()) < MIN_KEY_LENGTH:
            raise ValueError(
                f"must be at least {MIN_KEY_LENGTH} characters: a short key can be guessed"
            )
        return key

    @property
    def table_names(self) -> list[str]:
        """``schema.table`` (or ``db.collection``) of every captured table, in order."""
        return [t.name for t in self.tables]

    def table_entry(self, name: str) -> TableEntry:
        """The entry of table ``name`` (a plain one if it is not captured)."""
        return next((t for t in self.tables if t.name == name), TableEntry(name=name))

    def mask_key_bytes(self) -> bytes | None:
        """The hash masks' key, as HMAC takes it."""
        return None if self.mask_key is None else self.mask_key.get_secret_value().encode()


#: Records a sink task reads and applies at a time. Every sink of a pipeline holds one batch, in
#: several forms (stored bytes, decoded rows, the store's own), at once: 5,000 put a pipeline with
#: DuckDB, Redis and search sinks at 330 MB RSS during a 1M-row transaction, 2,000 at 289 MB, in
#: the same catch-up time (bench/memory.py, 2026-12-06).
BATCH_RECORDS = 2000


class SinkConfig(StrictModel):
    """Fields every sink shares; a plugin's model extends it.

    ``batch_records`` bounds the records the sink applies (and flushes) at a time: larger
    batches spread a flush's fixed cost over more records, smaller ones hold less memory.
    ``batch_bytes`` bounds their bytes too, about: fewer records a batch when they are large
    (:mod:`cdc.runtime.read_size`).
    """

    name: str = Field(pattern=NAME_PATTERN)
    type: str
    tables: list[str] | None = None  # None: every table of the source
    batch_records: int = Field(default=BATCH_RECORDS, ge=1, le=100_000)
    batch_bytes: BatchBytes = BATCH_BYTES


class EmbeddedLogConfig(StrictModel):
    type: Literal["embedded"] = "embedded"
    path: str | None = None  # None: .cdc/<pipeline name>
    partitions: int = Field(default=1, ge=1, le=256)
    durability: Literal["full", "normal"] = "full"
    tombstone_retention_ms: int = Field(default=24 * 3600 * 1000, ge=0)


class KafkaLogConfig(StrictModel):
    """Apache Kafka as the log (see :mod:`cdc.log.kafka`).

    ``properties`` go to every librdkafka client (security settings, timeouts);
    ``topic_properties`` to every topic the log creates, after the settings below.
    """

    type: Literal["kafka"]
    bootstrap_servers: str
    partitions: int = Field(default=3, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    properties: dict[str, str] = Field(default_factory=dict)
    topic_properties: dict[str, str] = Field(default_factory=dict)
    # A record stays uncompacted this long, so consumers that lag less see every version.
    min_compaction_lag_ms: int = Field(default=60_000, ge=0)
    # How long a tombstone survives compaction: sinks lagging less than this still see deletes.
    delete_retention_ms: int = Field(default=24 * 3600 * 1000, ge=0)
    segment_ms: int | None = Field(default=None, ge=1)  # None: the broker's default (7 days)
    transaction_timeout_ms: int = Field(default=60_000, ge=1000)
    session_timeout_ms: int = Field(default=10_000, ge=1000)
    connect_timeout_s: float = Field(default=15.0, gt=0, le=30)
    # The source's local state (its latest-image store, for TOAST fills): None is .cdc/<name>.
    state_path: str | None = None


class MetricsConfig(StrictModel):
    """The HTTP endpoint of ``cdc run`` and ``cdc sink`` (:mod:`cdc.metrics`)."""

    listen: str | None = None  # host:port of /metrics, /healthz, /readyz; None: off
    # A task that makes no progress while work waits for it this long is stalled.
    stall_after_s: float = Field(default=300.0, gt=0)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str | None) -> str | None:
        if listen is not None:
            parse_listen(listen)
        return listen


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9464`` for IPv6) as ``(host, port)``.

    Raises:
        ValueError: not ``host:port`` with a port in 0-65535.
    """
    host, sep, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"must be host:port, e.g. 127.0.0.1:9464 (got {listen!r})")
    return host, int(port)


class PipelineFile(StrictModel):
    """The core model; ``source`` and ``sinks`` are checked again by their plugins' models."""

    version: Literal[1]
    name: str = Field(pattern=NAME_PATTERN, max_length=40)
    # The raw sections hold secrets (a DSN's password, mask_key) as written: never in a repr.
    source: dict[str, Any] = Field(repr=False)
    log: EmbeddedLogConfig | KafkaLogConfig = Field(
        default_factory=EmbeddedLogConfig, discriminator="type"
    )
    sinks: list[dict[str, Any]] = Field(default_factory=list, repr=False)
    bad_records: Literal["fail", "dead_letter"] = "fail"
    envelope: EnvelopeOptions = Field(default_factory=lambda: EnvelopeOptions.model_validate({}))
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    transforms: list[dict[str, Any]] = Field(default_factory=list, repr=False)
    # What a start does when the log was written under other transforms or table filters
    # (cdc.runtime.fingerprints).
    on_transform_change: Literal["resnapshot", "continue", "fail"] = "fail"


class Pipeline(BaseModel):
    """A validated pipeline: the core file plus each plugin's typed config."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    file: PipelineFile
    source: SourceConfig
    sinks: list[SinkConfig]
    transforms: list[TransformConfig] = Field(default_factory=list)
    path: Path | None = None
    _chain: TransformChain | None = PrivateAttr(default=None)

    @property
    def name(self) -> str:
        return self.file.name

    @property
    def log(self) -> EmbeddedLogConfig | KafkaLogConfig:
        return self.file.log

    @property
    def envelope(self) -> EnvelopeOptions:
        """How records are written (the ``envelope:`` block, Debezium's option names)."""
        return self.file.envelope

    def with_metrics_listen(self, listen: str | None) -> Pipeline:
        """This pipeline with ``metrics.listen`` set (``--metrics-listen``), if ``listen``."""
        if listen is None:
            return self
        metrics = MetricsConfig(listen=listen, stall_after_s=self.file.metrics.stall_after_s)
        return self.model_copy(update={"file": self.file.model_copy(update={"metrics": metrics})})

    def log_path(self) -> Path:
        """Where the embedded log lives (relative paths are relative to the working directory)."""
        log = self.file.log
        assert isinstance(log, EmbeddedLogConfig)
        return Path(log.path) if log.path else Path(".cdc") / self.name

    def state_path(self) -> Path:
        """Where the source keeps local state: the embedded log's directory, or the Kafka log's
        ``state_path`` (default ``.cdc/<name>``)."""
        log = self.file.log
        if isinstance(log, KafkaLogConfig):
            return Path(log.state_path) if log.state_path else Path(".cdc") / self.name
        return self.log_path()

    def source_tables(self) -> list[tuple[str, str]]:
        return [_split(t) for t in self.source.table_names]

    def chain(self) -> TransformChain:
        """The pipeline's transforms, built once."""
        if self._chain is None:
            self._chain = build_chain(self.transforms, self.name, self.source.table_names)
        return self._chain

    def output_tables(self) -> list[str]:
        """``schema.table`` of every table with a topic: the source's tables after the
        transforms routed them (two tables merged into one are one), in order."""
        chain = self.chain()
        return list(dict.fromkeys(chain.table(t) for t in self.source.table_names))

    def routed_from(self, table: str) -> list[str]:
        """The source tables whose events reach ``table``'s topic."""
        chain = self.chain()
        return [t for t in self.source.table_names if chain.table(t) == table]

    def sink_tables(self, sink: SinkConfig) -> list[tuple[str, str]]:
        """The tables (topics) ``sink`` consumes: its ``tables``, else every output table."""
        return [_split(t) for t in (sink.tables or self.output_tables())]

    def sink(self, name: str) -> SinkConfig:
        for sink in self.sinks:
            if sink.name == name:
                return sink
        raise KeyError(name)


def _split(table: str) -> tuple[str, str]:
    schema, _, name = table.partition(".")
    return schema, name


#: A DSN or URL with its secrets replaced by ``***``: :func:`cdc.support.redact.redact` itself,
#: under the name the plugins import.
redact_url = redact


def secret_value(value: SecretStr | str) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


# -- loading -------------------------------------------------------------------------------------


def parse(text: str, env: dict[str, str] | None = None, path: Path | None = None) -> Pipeline:
    """Validate a pipeline file's text.

    Raises:
        ConfigError: with every problem found, each with its YAML path.
    """
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"not valid YAML: {exc}")]) from exc
    if not isinstance(raw, dict):
        raise ConfigError([("", "the pipeline file must be a YAML mapping")])
    expanded, problems = expand_env(raw, dict(os.environ) if env is None else env)
    unexpanded = list(problems)
    core: PipelineFile | None = None
    try:
        core = PipelineFile.model_validate(expanded)
    except ValidationError as exc:
        problems.extend(pydantic_problems(exc, model=PipelineFile))
    source, sub = plugin_section(
        plugins.SOURCE_GROUP, expanded.get("source"), SourceConfig, ("source",)
    )
    if "source" in expanded:
        problems.extend(sub)
    sinks: list[SinkConfig] = []
    raw_sinks = expanded.get("sinks") or []
    for index, section in enumerate(raw_sinks if isinstance(raw_sinks, list) else []):
        sink, sub = plugin_section(plugins.SINK_GROUP, section, SinkConfig, ("sinks", index))
        problems.extend(sub)
        if sink is not None:
            sinks.append(sink)
    transforms, sub = transform_sections(expanded.get("transforms"))
    problems.extend(sub)
    chain = built_chain(transforms, expanded, source, problems)
    problems.extend(cross_checks(source, sinks, chain))
    problems = list(dict.fromkeys(problems))  # one mistake can surface in two layers
    # A value that could not be expanded fails its plugin's checks too; that says nothing new.
    bad_values = {where for where, _ in unexpanded}
    problems = [p for p in problems if p in unexpanded or p[0] not in bad_values]
    if problems or core is None or source is None:
        raise ConfigError(problems or [("", "invalid pipeline file")])
    pipeline = Pipeline(file=core, source=source, sinks=sinks, transforms=transforms, path=path)
    pipeline._chain = chain  # built for the checks already: a run uses the same one
    return pipeline


def load(path: str | Path, env: dict[str, str] | None = None) -> Pipeline:
    """Read and validate a pipeline file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([("", f"cannot read {file}: {exc.strerror}")]) from exc
    return parse(text, env, file)
