"""What the ``cdc`` commands share: loading the file, the exit codes, the opened log."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
import orjson

from cdc.config import pipeline as config_mod
from cdc.config.pipeline import Pipeline
from cdc.contracts.errors import CdcError, ConfigError
from cdc.log.base import Log
from cdc.log.factory import open_log

EXIT_RUNTIME = 1
EXIT_CONFIG = 2


def load(path: str) -> Pipeline:
    try:
        return config_mod.load(path)
    except ConfigError as exc:
        click.echo(f"{path}: {len(exc.problems)} problem(s)", err=True)
        for where, message in exc.problems:
            click.echo(f"  {where or '(file)'}: {message}", err=True)
        sys.exit(EXIT_CONFIG)


@contextmanager
def runtime_errors() -> Iterator[None]:
    try:
        yield
    except CdcError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_RUNTIME)


@contextmanager
def opened_log(pipeline: Pipeline) -> Iterator[Log]:
    with runtime_errors():
        log = open_log(pipeline)
        try:
            yield log
        finally:
            log.close()


def emit_json(data: Any) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
