"""The one place secrets are taken out of text: DSNs, URLs and the messages that quote them.

:func:`redact` masks every secret form that libpq, redis-py, pymongo and HTTP clients accept:

- URL userinfo: ``scheme://user:SECRET@host`` (also multi-host, IPv6 and percent-encoded). No
  parser accepts a raw ``/`` in userinfo, so everything from the first ``:`` to the last ``@``
  before the first ``/`` is masked; libpq stops at the first ``@``, the others at the last, and
  masking the wider span covers both readings.
- URL query parameters whose (percent-decoded) name names a secret: ``?password=``,
  ``?sslpassword=``, ``?pass%77ord=``... A value runs to the next ``&`` or ``;`` that starts
  another ``name=``, so a raw ``&`` inside a password (which libpq would split on) stays masked.
- keyword/value DSNs (``host=h password='a b' dbname=x``), read as libpq reads them: spaces
  around ``=``, single quotes, backslash escapes. A text that *is* a keyword DSN (it starts
  with ``name=``) is also masked over any word after a secret that is not itself a
  ``name=value`` pair: libpq rejects such a string, and the word is most likely the rest of an
  unquoted password with a space in it.
- ``"password": "..."`` and ``'password': '...'`` in JSON or a Python ``repr``, and
  ``password="..."`` as in Java's JAAS settings.

A name names a secret when, lower-cased with everything but letters and digits dropped, it
contains ``password``, ``passwd``, ``passphrase``, ``pwd``, ``secret``, ``token``, ``credential``,
``apikey``, ``accesskey``, ``privatekey``, ``keypem`` (librdkafka's ``ssl.key.pem``) or
``signature``, or is exactly ``pass``, ``pw``, ``key``, ``sig``, ``auth`` or
``authmechanismproperties`` (MongoDB's, which can carry an AWS session token). Names of files
holding a secret are not secrets: ``sslkey``, ``passfile``, ``tlsCertificateKeyFile`` and
``ssl.key.location`` stay readable (but ``tlsCertificateKeyFilePassword`` does not).

A driver's message about a DSN can quote a raw piece of it that no pattern recognises (libpq's
``invalid percent-encoded token: "p%zz"``). Given that DSN, :func:`redact` also masks its secret
values wherever they appear (those of at least :data:`MIN_LITERAL` characters; masking every
``ab`` would garble a message for a password that protects nothing), and every quoted piece of
the DSN that its redacted form does not show.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
MIN_LITERAL = 4

_SECRET_PARTS = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "credential",
    "apikey",
    "accesskey",
    "privatekey",
    "keypem",
    "signature",
)
_SECRET_NAMES = frozenset({"pass", "pw", "key", "sig", "auth", "authmechanismproperties"})

_NAME = r"[A-Za-z_][\w.%\-]*"
_SCHEME = re.compile(r"(?<![\w+.\-])[A-Za-z][\w+.\-]*://")
_PAIR = re.compile(rf"(?<![\w.%\-])({_NAME})\s*=\s*")
_PAIR_AHEAD = re.compile(rf"{_NAME}\s*=")
_QUOTED_KEY = re.compile(rf"""(["'])({_NAME})\1\s*:\s*(["'])""")
_QUERY_NEXT = re.compile(rf"[&;](?={_NAME}=)")
_QUOTED_PIECE = re.compile(r""""([^"]+)"|'([^']+)'""")
_BLANK = re.compile(r"\s")
_BLANKS = re.compile(r"\s+")

Span = tuple[int, int]


def names_secret(name: str) -> bool:
    """Whether a parameter or property name names a secret (the rule in the module doc)."""
    plain = re.sub(r"[^a-z0-9]", "", unquote(name).lower())
    return plain in _SECRET_NAMES or any(part in plain for part in _SECRET_PARTS)


def field_names_secret(name: str) -> bool:
    """Whether a structured field (a log event's key, a dict key) names a secret: the longer
    parts only, so that fields such as ``key`` (a record's key) stay readable."""
    plain = re.sub(r"[^a-z0-9]", "", name.lower())
    return any(part in plain for part in _SECRET_PARTS)


def redact(text: str, dsn: str | None = None) -> str:
    """``text`` with every secret of the DSNs and URLs in it replaced by ``***``.

    Safe on any text (a bare DSN, a message, a traceback); it never raises.

    Args:
        text: what is about to be logged, shown or stored.
        dsn: the connection string ``text`` is about, when ``text`` is a driver's message:
            its secret values and quoted raw pieces are masked too.

    Returns:
        The text with secrets masked; text without ``=``, ``://`` or quotes comes back as is.
    """
    if dsn:
        text = _mask_known(text, dsn)
    if "=" not in text and "://" not in text and "'" not in text and '"' not in text:
        return text  # no form below can occur (a timestamp, an event name): the common case
    return _apply(text, _secret_spans(text))


def _apply(text: str, spans: list[Span]) -> str:
    out, at = [], 0
    for start, end in sorted(spans):
        if start < at:  # spans of nested forms overlap: the outer one already masks it
            start = at
        if end <= start or _masked_already(text[start:end]):
            continue
        out += [text[at:start], MASK]
        at = end
    return "".join(out) + text[at:]


def _masked_already(value: str) -> bool:
    """``***`` and ``***:`` are what redacting gave (a message built from a redacted DSN and
    redacted again); keeping them keeps the punctuation that followed the DSN."""
    rest = value.strip("'\"").removeprefix(MASK)
    return len(rest) < len(value) and not any(char.isalnum() for char in rest)


def _secret_spans(text: str) -> list[Span]:
    spans: list[Span] = []
    whole = text.strip()
    if _SCHEME.match(whole):  # the text is one URL: read it as the driver would, to its end
        start = text.index(whole)
        return _url_spans(text, start, start + len(whole))
    gaps, at = [], 0
    for match in _SCHEME.finditer(text):
        if match.start() < at:
            continue
        end = _token_end(text, match.start())
        spans += _url_spans(text, match.start(), end)
        gaps.append((at, match.start()))
        at = end
    gaps.append((at, len(text)))
    is_dsn = _PAIR.match(whole) is not None
    for start, end in gaps:
        spans += _keyword_spans(text, start, end, is_dsn and start == 0)
        spans += _quoted_key_spans(text, start, end)
    return spans


def _token_end(text: str, start: int) -> int:
    match = _BLANK.search(text, start)
    return len(text) if match is None else match.start()


def _url_spans(text: str, start: int, end: int) -> list[Span]:
    """Userinfo password and secret query values of the URL ``text[start:end]``."""
    spans: list[Span] = []
    rest = text.index("://", start) + 3
    slash = text.find("/", rest, end)
    authority_end = end if slash < 0 else slash
    at = text.rfind("@", rest, authority_end)
    colon = text.find(":", rest, at) if at >= 0 else -1
    if colon >= 0 and at > colon + 1:
        spans.append((colon + 1, at))
    query = text.find("?", max(at, rest), end)
    if query >= 0:
        spans += _query_spans(text, query + 1, end)
    return spans


def _query_spans(text: str, start: int, end: int) -> list[Span]:
    spans: list[Span] = []
    at = start
    while at < end:
        following = _QUERY_NEXT.search(text, at, end)
        stop = end if following is None else following.start()
        name, eq, _ = text[at:stop].partition("=")
        if eq and names_secret(name) and stop > at + len(name) + 1:
            spans.append((at + len(name) + 1, stop))
        at = stop + 1
    return spans


def _keyword_spans(text: str, start: int, end: int, greedy: bool) -> list[Span]:
    """Values of secret ``name=value`` pairs in ``text[start:end]``, as libpq parses them."""
    spans: list[Span] = []
    at = start
    while (match := _PAIR.search(text, at, end)) is not None:
        value_start = match.end()
        if not names_secret(match.group(1)):
            at = value_start
            continue
        value_end = _value_end(text, value_start, end)
        if greedy:
            value_end = _swallow_words(text, value_end, end)
        if value_end > value_start:
            spans.append((value_start, value_end))
        at = max(value_end, value_start + 1)
    return spans


def _value_end(text: str, start: int, end: int) -> int:
    """Where libpq's value starting at ``start`` ends (quoted, or up to a blank)."""
    if start >= end:
        return start
    quote = text[start] if text[start] in "'\"" else None
    at = start + 1 if quote else start
    while at < end:
        char = text[at]
        if char == "\\":
            at += 2
            continue
        if (quote and char == quote) or (not quote and char.isspace()):
            return at + 1 if quote else at
        at += 1
    return end  # unterminated: libpq rejects it, and all of it may be the secret


def _swallow_words(text: str, at: int, end: int) -> int:
    """Past every blank-separated word after ``at`` up to the next ``name=`` pair."""
    while at < end:
        word = _BLANKS.match(text, at, end)
        next_at = word.end() if word else at
        if next_at >= end or _PAIR_AHEAD.match(text, next_at, end):
            return at
        at = _value_end(text, next_at, end)
    return at


def _quoted_key_spans(text: str, start: int, end: int) -> list[Span]:
    """``"password": "..."`` (JSON) and ``'password': '...'`` (a Python repr)."""
    spans: list[Span] = []
    for match in _QUOTED_KEY.finditer(text, start, end):
        if names_secret(match.group(2)):
            closing = _value_end(text, match.end() - 1, end)
            terminated = closing < end or text[closing - 1] == match.group(3)
            spans.append((match.end(), max(match.end(), closing - 1 if terminated else end)))
    return spans


def _mask_known(text: str, dsn: str) -> str:
    """Mask ``dsn``'s own secret values, and the quoted raw pieces of it its redaction hides."""
    shown = redact(dsn)
    values = set()
    for start, end in _secret_spans(dsn):
        raw = dsn[start:end].strip("'\"")
        values.update({raw, unquote(raw), re.sub(r"\\(.)", r"\1", raw)})

    def piece(match: re.Match[str]) -> str:
        inner = match.group(1) or match.group(2)
        if inner in dsn and inner not in shown:
            return match.group(0).replace(inner, MASK)
        return match.group(0)

    text = _QUOTED_PIECE.sub(piece, text)
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= MIN_LITERAL:
            text = text.replace(value, MASK)
    return text
