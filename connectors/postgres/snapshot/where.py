"""Check that ``cdc snapshot --where`` is one SQL expression, with PostgreSQL's own lexical rules.

The text is the operator's SQL, passed through into ``WHERE (<where>)`` of the chunk reads, so
it must not end the statement (``;``), comment out the rest of it (``--``, ``/*``) or close more
parentheses than it opens. Those characters are harmless inside a string literal, a dollar-quoted
string or a quoted identifier, so the text is split into tokens the way the server's lexer
(``scan.l``) splits it, and only tokens outside literals count.

Assumed: ``standard_conforming_strings = on`` (the default since PostgreSQL 9.1; the server-side
check refuses a server where it is off), so a backslash escapes only inside ``E'...'``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from cdc.contracts.errors import ConfigError, SourceFatal
from connectors.postgres.errors import server_error

#: Rows the server-side check evaluates ``--where`` on: enough to catch most expressions that
#: fail at run time (a volatile function refused in a read-only transaction, a bad cast), cheap
#: on any table. What it misses fails the request at run time, never the pipeline.
SAMPLE_ROWS = 100
PROBE_TIMEOUT = "30s"

#: An identifier or key word: ``$`` may follow its first character, so ``a$b$`` is no dollar quote.
_WORD = re.compile(r"[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_$\x80-\U0010ffff]*")
#: The opening tag of a dollar-quoted string: ``$$`` or ``$tag$`` (a tag never starts with a digit).
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_\x80-\U0010ffff]*)?\$")
#: String prefixes: ``E'..'`` (backslash escapes), ``B'..'``, ``X'..'``, ``N'..'``, ``U&'..'``.
_PREFIXED = re.compile(r"(?:[EeBbXxNn]|[Uu]&)'")
_UNICODE_IDENT = re.compile(r'[Uu]&"')


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical token: ``kind`` is ``string``, ``identifier``, ``comment``, ``word`` or
    ``other`` (one character: an operator, punctuation, a digit); ``closed`` is False for a
    literal or comment the text ends inside."""

    kind: str
    text: str
    closed: bool = True


def tokens(text: str) -> list[Token]:
    """The text's tokens, whitespace left out."""
    found: list[Token] = []
    at = 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        token, at = _token(text, at)
        found.append(token)
    return found


def _token(text: str, at: int) -> tuple[Token, int]:
    """The token starting at ``at`` and where the next one starts."""
    if text.startswith("--", at):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        return Token("comment", text[at:end]), end
    if text.startswith("/*", at):
        return _block_comment(text, at)
    if prefixed := _PREFIXED.match(text, at):
        backslashes = text[at] in "Ee"
        return _quoted(text, prefixed.end() - 1, "string", "'", backslashes, at)
    if unicode_ident := _UNICODE_IDENT.match(text, at):
        return _quoted(text, unicode_ident.end() - 1, "identifier", '"', False, at)
    if word := _WORD.match(text, at):
        return Token("word", word.group()), word.end()
    if text[at] == "'":
        return _quoted(text, at, "string", "'", False, at)
    if text[at] == '"':
        return _quoted(text, at, "identifier", '"', False, at)
    if tag := _DOLLAR_TAG.match(text, at):
        end = text.find(tag.group(), tag.end())
        if end < 0:
            return Token("string", text[at:], closed=False), len(text)
        end += len(tag.group())
        return Token("string", text[at:end]), end
    return Token("other", text[at]), at + 1


def _quoted(
    text: str, quote_at: int, kind: str, quote: str, backslashes: bool, start: int
) -> tuple[Token, int]:
    """A literal from its opening ``quote``: a doubled quote stands for one, and in ``E'..'`` a
    backslash escapes the next character."""
    at = quote_at + 1
    while at < len(text):
        char = text[at]
        if backslashes and char == "\\":
            at += 2
            continue
        if char == quote:
            if text.startswith(quote, at + 1):
                at += 2
                continue
            return Token(kind, text[start : at + 1]), at + 1
        at += 1
    return Token(kind, text[start:], closed=False), len(text)


def _block_comment(text: str, start: int) -> tuple[Token, int]:
    """``/* ... */``, which nest in PostgreSQL."""
    depth, at = 0, start
    while at < len(text):
        if text.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif text.startswith("*/", at):
            depth, at = depth - 1, at + 2
            if depth == 0:
                return Token("comment", text[start:at]), at
        else:
            at += 1
    return Token("comment", text[start:], closed=False), len(text)


def problems(where: str) -> list[str]:
    """Why ``where`` cannot be one expression inside ``WHERE (...)`` (empty when it can)."""
    found = tokens(where)
    if not found:
        return ["--where is empty"]
    reasons = []
    if any(not t.closed for t in found):
        reasons.append("--where ends inside a quoted string, identifier or comment")
    if any(t.kind == "comment" for t in found):
        reasons.append("--where may not contain comments (-- or /* */)")
    if any(t.kind == "other" and t.text == ";" for t in found):
        reasons.append("--where must be one expression: ';' ends a statement")
    if not _balanced(found):
        reasons.append("--where has unbalanced parentheses")
    return reasons


def _balanced(found: list[Token]) -> bool:
    depth = 0
    for token in found:
        if token.kind != "other":
            continue
        depth += {"(": 1, ")": -1}.get(token.text, 0)
        if depth < 0:
            return False
    return depth == 0


def check_where_text(where: str, *, signal: bool = False) -> None:
    """Refuse what cannot be a single expression (see the module docstring).

    Args:
        signal: the text came in a request found in the signal table, not from the operator's
            command (a hand-written signal skipped ``cdc snapshot``'s check).

    Raises:
        ConfigError: with every reason, under ``--where``.
        SourceFatal: with every reason, for a ``signal``: it fails the request, not the stream.
    """
    reasons = problems(where)
    if reasons and signal:
        raise SourceFatal("; ".join(reasons))
    if reasons:
        raise ConfigError([("--where", reason) for reason in reasons])


def check_where_on_server(
    conn: psycopg.Connection[Any],
    table: str,
    where: str,
    row_filter: str | None = None,
    hides_values: bool = False,
) -> None:
    """The server accepts ``where`` as a condition on ``table`` and evaluates it on a sample of
    the rows the table's ``row_filter`` keeps, all in a transaction begun read-only (so
    ``nextval()`` and the like are refused, not run: nothing the check evaluates writes).

    The sample stays inside the row filter: a row it leaves out is not the pipeline's to read,
    and an error about one of its values would show that value.

    Args:
        hides_values: the table has masks, left-out columns or a row filter: a refusal that may
            quote a value is summarised (:func:`connectors.postgres.errors.server_error`).

    Raises:
        ConfigError: the server refuses it, with the server's reason (or its summary).
    """
    schema, _, name = table.partition(".")
    target = sql.Identifier(schema, name)
    condition = sql.SQL(where)  # the operator's own SQL, checked by check_where_text
    scope = sql.SQL(" WHERE ({})").format(sql.SQL(row_filter)) if row_filter else sql.SQL("")
    typed = sql.SQL("SELECT 1 FROM {} WHERE ({}) LIMIT 0").format(target, condition)
    sample = sql.SQL("SELECT ({}) FROM {}{} LIMIT {}").format(
        condition, target, scope, sql.Literal(SAMPLE_ROWS)
    )
    read_only = conn.read_only
    conn.read_only = True  # BEGIN READ ONLY: read-only from the transaction's first statement
    try:
        with conn.transaction():
            conn.execute(
                sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(PROBE_TIMEOUT))
            )
            row = conn.execute(sql.SQL("SHOW standard_conforming_strings")).fetchone()
            if row is None or row[0] != "on":
                raise ConfigError(
                    [("--where", "needs the server's standard_conforming_strings = on")]
                )
            conn.execute(typed)  # a boolean condition on this table's columns
            conn.execute(sample).fetchall()  # and one it can evaluate on rows
    except psycopg.Error as exc:
        reason = f"the server rejects it: {server_error(exc, hides_values)}"
        # Not chained where values are hidden: a logged traceback would print the original.
        raise ConfigError([("--where", reason)]) from (None if hides_values else exc)
    finally:
        conn.read_only = read_only
