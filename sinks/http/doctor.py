"""``cdc doctor`` for the ``http`` sink: the receiver answers a signed, empty batch.

Why a signed ping rather than ``HEAD``/``OPTIONS``: a webhook endpoint commonly answers those
405 whatever its state, which proves only that something listens. A POST of ``{"pipeline",
"sink", "records": []}``, signed and carrying the configured headers, goes through the same
checks a real batch does (the route, the credentials, the signature), and changes nothing on a
receiver that applies records. Nothing the check reports holds a secret: the URL is shown as
``scheme://host[:port]/…`` and a response's body is never shown.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx

from cdc.contracts.checks import Check, failed, passed, warned
from sinks.http import signing
from sinks.http.config import HttpSinkConfig
from sinks.http.retrying import Outcome, outcome
from sinks.http.sink import client

NAME = "receiver answers a signed empty batch"


def ping_body(pipeline_name: str, sink: str) -> bytes:
    return b'{"pipeline":"%s","sink":"%s","records":[]}' % (pipeline_name.encode(), sink.encode())


def doctor(config: HttpSinkConfig, pipeline_name: str) -> list[Check]:
    """The ping's answer, and a warning for plain ``http://`` to another host."""
    checks = [_ping(config, pipeline_name)]
    url = urlsplit(config.url.get_secret_value())
    if url.scheme == "http" and url.hostname not in ("localhost", "127.0.0.1", "::1"):
        checks.append(
            warned(
                "transport",
                "plain http: the signature proves who sent a batch, it does not hide it",
                "use an https:// URL",
            )
        )
    return checks


def _ping(config: HttpSinkConfig, pipeline_name: str) -> Check:
    where = config.shown_url
    body = ping_body(pipeline_name, config.name)
    key = signing.signing_key(config.secret.get_secret_value())
    message = f"msg_ping_{int(time.time())}"
    headers = signing.headers(key, message, int(time.time()), body)
    try:
        with client(config) as http:
            response = http.post(config.url.get_secret_value(), content=body, headers=headers)
    except httpx.TransportError as exc:
        return failed(
            NAME,
            f"{where}: {type(exc).__name__}",
            "check that the URL's host resolves and its server listens (and timeout_s)",
        )
    status = response.status_code
    answer = f"{where}: HTTP {status} {response.reason_phrase}"
    found = outcome(status)
    if found is Outcome.DELIVERED:
        return passed(NAME, answer)
    if found is Outcome.RETRY:
        return failed(NAME, answer, "the receiver is failing or busy now: see its logs")
    return failed(
        NAME,
        answer,
        "check the url, the headers (credentials) and the secret the receiver verifies with; "
        "a receiver must answer 2xx to a batch with no records",
    )
