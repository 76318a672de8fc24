"""Column masks: what a masked value becomes before anything is encoded.

A mask works on a value's *text*: PostgreSQL's text output of the value (what pgoutput and
``COPY`` give the source), or for MongoDB a string field as it is and any other value as its
relaxed Extended JSON text. NULL stays NULL under every mask (a missing value hides nothing).

* ``hash``: HMAC-SHA256 of the text keyed by ``source.mask_key``, as 64 hex digits. Equal values
  give equal hashes, so masked columns still join and a masked key stays a key; without the key
  no one can test a guess (a plain hash of an e-mail address is a dictionary lookup away).
* ``redact``: the fixed text ``***``.
* ``null``: always NULL.
* ``keep_last``: every character but the last ``n`` replaced by ``*`` (``********4567``).
* ``plugin``: a function from the ``cdc.masks`` entry point group, ``factory(options)`` returning
  ``text -> value`` (the value must be JSON: a string, a number, a bool or ``None``).

Each mask is compiled once per column into a :class:`Mask`, a plain callable: the Python row
converters call it, and the native row encoder reads :attr:`Mask.kind` and its parameters to do
the same without the interpreter.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Any, Final, Literal

from cdc.contracts.errors import PluginNotFound

MaskType = Literal["hash", "redact", "null", "keep_last", "plugin"]
MASK_GROUP: Final = "cdc.masks"
REDACTED: Final = "***"
#: The type a masked column is published with: every mask but ``null`` writes text, and a
#: ``null`` mask's column holds nothing but NULL, which any type takes.
MASKED_TYPE: Final = "text"
#: The shortest ``mask_key`` accepted: a short key is a key someone can guess.
MIN_KEY_LENGTH: Final = 16


def hash_text(key: bytes, text: str) -> str:
    """HMAC-SHA256 of ``text``'s UTF-8 keyed by ``key``, in lower-case hex."""
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def keep_last(text: str, n: int) -> str:
    """``text`` with every character but the last ``n`` replaced by ``*``."""
    hidden = max(0, len(text) - n)
    return "*" * hidden + text[hidden:]


@dataclass(frozen=True, slots=True)
class Mask:
    """One column's mask, compiled: call it with a value's text.

    Attributes:
        kind: the mask's type.
        n: ``keep_last``'s count of characters kept.
        key: ``hash``'s HMAC key (never logged: ``repr`` leaves it out).
        plugin: ``plugin``'s function.
    """

    kind: MaskType
    n: int = 0
    key: bytes = b""
    plugin: Callable[[str], Any] | None = None

    def __call__(self, text: str) -> Any:
        kind = self.kind
        if kind == "hash":
            return hash_text(self.key, text)
        if kind == "redact":
            return REDACTED
        if kind == "keep_last":
            return keep_last(text, self.n)
        if kind == "null":
            return None
        assert self.plugin is not None
        return self.plugin(text)

    def __repr__(self) -> str:
        return (
            f"Mask({self.kind!r})" if self.kind != "keep_last" else f"Mask('keep_last', {self.n})"
        )

    @property
    def nullable(self) -> bool:
        """Whether the masked column may hold NULL where the column itself may not."""
        return self.kind in ("null", "plugin")


def compile_mask(
    kind: MaskType,
    *,
    n: int | None = None,
    key: bytes | None = None,
    plugin: str | None = None,
    options: dict[str, Any] | None = None,
) -> Mask:
    """The :class:`Mask` of a validated spec (:class:`cdc.transforms.filters.MaskSpec` holds these).

    Raises:
        ValueError: ``hash`` without a key; ``keep_last`` without ``n``.
        PluginNotFound: no ``cdc.masks`` entry point is called ``plugin``.
    """
    if kind == "hash":
        if not key:
            raise ValueError("a hash mask needs source.mask_key")
        return Mask("hash", key=key)
    if kind == "keep_last":
        if n is None or n < 0:
            raise ValueError("keep_last needs n >= 0")
        return Mask("keep_last", n=n)
    if kind == "plugin":
        if not plugin:
            raise ValueError("a plugin mask needs its name")
        return Mask("plugin", plugin=load_plugin(plugin)(dict(options or {})))
    return Mask(kind)


@cache
def available_plugins() -> tuple[str, ...]:
    """Names of the installed ``cdc.masks`` plugins."""
    return tuple(sorted(ep.name for ep in entry_points(group=MASK_GROUP)))


def load_plugin(name: str) -> Callable[[dict[str, Any]], Callable[[str], Any]]:
    """The factory the ``cdc.masks`` entry point ``name`` names.

    Raises:
        PluginNotFound: there is none.
    """
    for ep in entry_points(group=MASK_GROUP, name=name):
        factory: Callable[[dict[str, Any]], Callable[[str], Any]] = ep.load()
        return factory
    known = ", ".join(available_plugins()) or "none"
    raise PluginNotFound(f"unknown mask plugin {name!r} (installed: {known})")
