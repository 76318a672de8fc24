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
)

from cdc.config.checks import built_chain, cross_checks
from cdc.config.env import expand_env
from cdc.config.models import (
    NAME_PATTERN,
    EmbeddedLogConfig,
    KafkaLogConfig,
    MetricsConfig,
    SinkConfig,
    SourceConfig,
    StrictModel,
    VerifyConfig,
)
from cdc.config.sections import plugin_section, pydantic_problems, transform_sections
from cdc.config.views import ViewConfig, declared_view_tables, view_problems
from cdc.contracts import plugins
from cdc.contracts.errors import ConfigError
from cdc.envelope.options import EnvelopeOptions
from cdc.support.redact import redact
from cdc.transforms.base import TransformConfig
from cdc.transforms.chain import TransformChain, build_chain


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
    verify: VerifyConfig | None = None  # continuous verification in cdc run; None: off
    views: list[ViewConfig] = Field(default_factory=list)  # live join views (docs/views.md)


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
    def views(self) -> list[ViewConfig]:
        """The live join views (the ``views:`` section)."""
        return self.file.views

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
    problems.extend(cross_checks(source, sinks, chain, declared_view_tables(expanded.get("views"))))
    if core is not None:
        problems.extend(view_problems(core.views, source))
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
