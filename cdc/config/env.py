"""``${VAR}`` and ``${VAR:-default}`` in a pipeline file's strings, from the environment, and
the YAML paths every problem is reported under."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# A ``${`` that does not start a whole reference matches the second branch: it is an error, not
# text to keep (an unclosed ``${VAR`` used literally would reach the server as part of a DSN).
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
