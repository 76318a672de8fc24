"""The pipeline file: YAML, version 1, validated by pydantic with every error reported at once.

Validation runs in layers so that one mistake does not hide another: the core model first (with
``source`` and each sink kept as raw mappings), then each plugin's own model on its section. Every
problem carries its YAML path, such as ``sinks[1].url``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from cdc import plugins
from cdc.envelope_options import EnvelopeOptions
from cdc.errors import ConfigError, PluginNotFound
from cdc.redact import redact

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"
# A ``${`` that does not start a whole reference matches the second branch: it is an error, not
# text to keep (an unclosed ``${VAR`` used literally would reach the server as part of a DSN).
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(StrictModel):
    """Fields every source shares; a plugin's model extends it."""

    type: str
    tables: list[str] = Field(min_length=1)
    snapshot: Literal["initial", "never", "always", "when_needed"] = "initial"

    @field_validator("tables")
    @classmethod
    def _qualified(cls, tables: list[str]) -> list[str]:
        for table in tables:
            parts = table.split(".")
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"{table!r} must be qualified as schema.table (or db.collection)")
        if len(set(tables)) != len(tables):
            raise ValueError("tables are listed more than once")
        return tables


class SinkConfig(StrictModel):
    """Fields every sink shares; a plugin's model extends it."""

    name: str = Field(pattern=NAME_PATTERN)
    type: str
    tables: list[str] | None = None  # None: every table of the source


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
    source: dict[str, Any]
    log: EmbeddedLogConfig | KafkaLogConfig = Field(
        default_factory=EmbeddedLogConfig, discriminator="type"
    )
    sinks: list[dict[str, Any]] = Field(default_factory=list)
    bad_records: Literal["fail", "dead_letter"] = "fail"
    envelope: EnvelopeOptions = Field(default_factory=lambda: EnvelopeOptions.model_validate({}))
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)


class Pipeline(BaseModel):
    """A validated pipeline: the core file plus each plugin's typed config."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    file: PipelineFile
    source: SourceConfig
    sinks: list[SinkConfig]
    path: Path | None = None

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
        return [_split(t) for t in self.source.tables]

    def sink_tables(self, sink: SinkConfig) -> list[tuple[str, str]]:
        return [_split(t) for t in (sink.tables or self.source.tables)]

    def sink(self, name: str) -> SinkConfig:
        for sink in self.sinks:
            if sink.name == name:
                return sink
        raise KeyError(name)


def _split(table: str) -> tuple[str, str]:
    schema, _, name = table.partition(".")
    return schema, name


#: A DSN or URL with its secrets replaced by ``***``: :func:`cdc.redact.redact` itself, under
#: the name the plugins import.
redact_url = redact


def secret_value(value: SecretStr | str) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


# -- loading -------------------------------------------------------------------------------------


def yaml_path(loc: Sequence[int | str]) -> str:
    """``("sinks", 1, "url")`` -> ``sinks[1].url``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def expand_env(
    node: Any, env: dict[str, str], path: tuple[int | str, ...] = ()
) -> tuple[Any, list[tuple[str, str]]]:
    """Expand ``${VAR}`` and ``${VAR:-default}`` in every string of a parsed YAML tree."""
    problems: list[tuple[str, str]] = []
    if isinstance(node, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name is None:
                problems.append((yaml_path(path), _bad_reference(node, match.end())))
                return match.group(0)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append((yaml_path(path), f"environment variable {name} is not set"))
            return ""

        return _ENV_REF.sub(substitute, node), problems
    if isinstance(node, dict):
        out: dict[Any, Any] = {}
        for key, value in node.items():
            out[key], sub = expand_env(value, env, (*path, str(key)))
            problems.extend(sub)
        return out, problems
    if isinstance(node, list):
        items = []
        for index, value in enumerate(node):
            item, sub = expand_env(value, env, (*path, index))
            items.append(item)
            problems.extend(sub)
        return items, problems
    return node, problems


def _bad_reference(text: str, after: int) -> str:
    """What is wrong with the ``${`` that ends at ``after``; only the name is quoted, since
    what follows it may be a secret written in the file."""
    named = _ENV_NAME.match(text, after)
    shown = "${" + (named.group(0) if named else "")
    if "}" not in text[after:]:
        return f"{shown} has no closing brace: write ${{NAME}} or ${{NAME:-default}}"
    return f"{shown}... is not a valid reference: write ${{NAME}} or ${{NAME:-default}}"


def _pydantic_problems(
    exc: ValidationError, prefix: tuple[int | str, ...] = ()
) -> list[tuple[str, str]]:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        loc = [p for p in error["loc"] if not (isinstance(p, str) and p in ("embedded", "kafka"))]
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        problems.append((yaml_path((*prefix, *loc)), message))
    return problems


def _plugin_section(
    group: str, section: Any, base: type[BaseModel], prefix: tuple[int | str, ...]
) -> tuple[Any, list[tuple[str, str]]]:
    if not isinstance(section, dict):
        return None, [(yaml_path(prefix), "must be a mapping")]
    kind = section.get("type")
    if not isinstance(kind, str):
        return None, [(yaml_path((*prefix, "type")), "a type is required")]
    try:
        model: type[BaseModel] = plugins.load(group, kind).config_model
    except PluginNotFound as exc:
        return None, [(yaml_path((*prefix, "type")), str(exc))]
    if not issubclass(model, base):
        return None, [(yaml_path((*prefix, "type")), f"plugin {kind!r} has an invalid config")]
    try:
        return model.model_validate(section), []
    except ValidationError as exc:
        return None, _pydantic_problems(exc, prefix)


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
        problems.extend(_pydantic_problems(exc))
    source, sub = _plugin_section(
        plugins.SOURCE_GROUP, expanded.get("source"), SourceConfig, ("source",)
    )
    if "source" in expanded:
        problems.extend(sub)
    sinks: list[SinkConfig] = []
    raw_sinks = expanded.get("sinks") or []
    for index, section in enumerate(raw_sinks if isinstance(raw_sinks, list) else []):
        sink, sub = _plugin_section(plugins.SINK_GROUP, section, SinkConfig, ("sinks", index))
        problems.extend(sub)
        if sink is not None:
            sinks.append(sink)
    problems.extend(_cross_checks(source, sinks))
    problems = list(dict.fromkeys(problems))  # one mistake can surface in two layers
    # A value that could not be expanded fails its plugin's checks too; that says nothing new.
    bad_values = {where for where, _ in unexpanded}
    problems = [p for p in problems if p in unexpanded or p[0] not in bad_values]
    if problems or core is None or source is None:
        raise ConfigError(problems or [("", "invalid pipeline file")])
    return Pipeline(file=core, source=source, sinks=sinks, path=path)


def _cross_checks(source: SourceConfig | None, sinks: list[SinkConfig]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, sink in enumerate(sinks):
        if sink.name in seen:
            problems.append((f"sinks[{index}].name", f"sink name {sink.name!r} is used twice"))
        seen.add(sink.name)
        if source is not None and sink.tables:
            for t_index, table in enumerate(sink.tables):
                if table not in source.tables:
                    problems.append(
                        (f"sinks[{index}].tables[{t_index}]", f"{table!r} is not a source table")
                    )
    return problems


def load(path: str | Path, env: dict[str, str] | None = None) -> Pipeline:
    """Read and validate a pipeline file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([("", f"cannot read {file}: {exc.strerror}")]) from exc
    return parse(text, env, file)
