"""``cdc.support.redact.redact``: every secret form libpq, redis-py and pymongo accept, checked
against the drivers' own parsers (what each would use as the password must not survive
redaction)."""

from __future__ import annotations

import random
import sys
from urllib.parse import quote

import psycopg
import pytest
import structlog
from psycopg.conninfo import conninfo_to_dict
from pymongo.uri_parser import parse_uri
from redis.connection import parse_url

from cdc.contracts.errors import SourceFatal
from cdc.support.logging import configure, get_logger
from cdc.support.redact import MASK, names_secret, redact

PW = "Zq9s3cr3t"  # the secret every case hides; long enough to search for

FORMS = [
    # (input, expected output)
    ("postgresql://app:Zq9s3cr3t@db:5432/shop", "postgresql://app:***@db:5432/shop"),
    ("postgres://u@h/db?password=Zq9s3cr3t", "postgres://u@h/db?password=***"),
    ("redis://h:6379/0?password=Zq9s3cr3t", "redis://h:6379/0?password=***"),
    ("redis://:Zq9s3cr3t@h:6379/0", "redis://:***@h:6379/0"),
    ("rediss://user:Zq9s3cr3t@h/1?ssl_cert_reqs=none", "rediss://user:***@h/1?ssl_cert_reqs=none"),
    ("unix:///tmp/r.sock?password=Zq9s3cr3t&db=1", "unix:///tmp/r.sock?password=***&db=1"),
    (
        "postgresql://u@h/db?sslmode=require&password=Zq9s3cr3t&application_name=x",
        "postgresql://u@h/db?sslmode=require&password=***&application_name=x",
    ),
    ("postgresql://u@h/db?pass%77ord=Zq9s3cr3t&x=1", "postgresql://u@h/db?pass%77ord=***&x=1"),
    ("postgresql://u@h/db?%70assword=Zq9s3cr3t", "postgresql://u@h/db?%70assword=***"),
    (
        "postgresql://u@h/db?sslpassword=Zq9s3cr3t&sslkey=/k.pem",
        "postgresql://u@h/db?sslpassword=***&sslkey=/k.pem",
    ),
    (
        "postgresql://u@h/db?oauth_client_secret=Zq9s3cr3t&oauth_client_id=c",
        "postgresql://u@h/db?oauth_client_secret=***&oauth_client_id=c",
    ),
    ("postgresql://u:Zq9%40s3cr3t@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:Zq9?s3cr3t@h/db", "postgresql://u:***@h/db"),  # libpq takes a raw "?"
    ("postgresql://u:Zq9@s3cr3t@h/db", "postgresql://u:***@h/db"),
    (
        "postgresql://u:Zq9s3cr3t@h1:5432,h2:5433/db?target_session_attrs=read-write",
        "postgresql://u:***@h1:5432,h2:5433/db?target_session_attrs=read-write",
    ),
    (
        "postgresql://u@h1,h2:5433/db?password=Zq9s3cr3t",
        "postgresql://u@h1,h2:5433/db?password=***",
    ),
    ("postgresql://u:Zq9s3cr3t@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
    ("postgresql://u:Zq9s3cr3t@%2Fvar%2Frun%2Fpg/db", "postgresql://u:***@%2Fvar%2Frun%2Fpg/db"),
    ("postgresql://u@h/db?password=Zq9&s3cr3t&x=1", "postgresql://u@h/db?password=***&x=1"),
    ("postgresql://u@h/db?password=Zq9;s3cr3t", "postgresql://u@h/db?password=***"),
    (
        "mongodb://u:Zq9s3cr3t@h1:27017,h2:27017/db?replicaSet=rs&authSource=admin",
        "mongodb://u:***@h1:27017,h2:27017/db?replicaSet=rs&authSource=admin",
    ),
    (
        "mongodb://h/?tlsCertificateKeyFile=/k.pem;tlsCertificateKeyFilePassword=Zq9s3cr3t",
        "mongodb://h/?tlsCertificateKeyFile=/k.pem;tlsCertificateKeyFilePassword=***",
    ),
    (
        "mongodb+srv://h/?authMechanismProperties=AWS_SESSION_TOKEN:Zq9s3cr3t",
        "mongodb+srv://h/?authMechanismProperties=***",
    ),
    (
        "https://h/x?X-Amz-Signature=Zq9s3cr3t&X-Amz-Expires=3",
        "https://h/x?X-Amz-Signature=***&X-Amz-Expires=3",
    ),
    # keyword/value, as libpq parses it
    ("host=db password=Zq9s3cr3t user=app", "host=db password=*** user=app"),
    ("host=db password = Zq9s3cr3t user=app", "host=db password = *** user=app"),
    ("host=db password='Zq9 s3cr3t' dbname=x", "host=db password=*** dbname=x"),
    ("host=db password='Zq9\\' s3cr3t' dbname=x", "host=db password=*** dbname=x"),
    ("host=db password=Zq9\\ s3cr3t dbname=x", "host=db password=*** dbname=x"),
    ("host=db sslpassword=Zq9s3cr3t sslkey=/k.pem", "host=db sslpassword=*** sslkey=/k.pem"),
    ("host=db password=Zq9 s3cr3t", "host=db password=***"),  # an unquoted space: all masked
    ("host=db password='Zq9s3cr3t dbname=x", "host=db password=***"),  # unterminated
    ("dbname='postgresql://u:Zq9s3cr3t@h/db' host=x", "dbname='postgresql://u:***@h/db' host=x"),
    # in messages, JSON, reprs and JAAS settings
    (
        "cannot connect to PostgreSQL at postgresql://u@h/db?password=Zq9s3cr3t (retrying)",
        "cannot connect to PostgreSQL at postgresql://u@h/db?password=*** (retrying)",
    ),
    (
        "PostgreSQL at host=h password=Zq9s3cr3t is down",
        "PostgreSQL at host=h password=*** is down",
    ),
    ("{'sasl.password': 'Zq9s3cr3t', 'acks': 'all'}", "{'sasl.password': '***', 'acks': 'all'}"),
    ('{"password": "Zq9s3cr3t", "user": "u"}', '{"password": "***", "user": "u"}'),
    (
        'PlainLoginModule required username="u" password="Zq9s3cr3t";',
        'PlainLoginModule required username="u" password=***;',
    ),
]

UNCHANGED = [
    "redis://127.0.0.1:6379/0",
    "postgresql://u@h:5432/db?sslmode=require&application_name=cdc",
    "host=h port=5432 dbname=shop user=app sslkey=/k.pem sslcert=/c.pem passfile=/p",
    "mongodb://h/?tlsCertificateKeyFile=/k.pem&authSource=admin",
    "snapshot of public.orders done: 1,000 rows in 2 chunks (ratio=0.5)",
    "",
    "postgresql://u:***@h/db",
    "PostgreSQL at postgresql://u@h/db?password=***: connection refused",
]


@pytest.mark.parametrize(("text", "expected"), FORMS)
def test_each_form_is_masked(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert "s3cr3t" not in redact(text)
    assert redact(redact(text)) == redact(text)  # a message built from a redacted DSN


@pytest.mark.parametrize("text", UNCHANGED)
def test_text_without_secrets_is_unchanged(text: str) -> None:
    assert redact(text) == text


SECRET = "Zq9 p'a\\s@s&w=o%r/d#?;x"  # every character that needs quoting somewhere


def _libpq_forms() -> list[str]:
    encoded = quote(SECRET, safe="")
    escaped = SECRET.replace("\\", "\\\\").replace("'", "\\'")
    return [
        f"postgresql://u:{encoded}@h:5432/db",
        f"postgresql://u@h:5432/db?password={encoded}",
        f"postgresql://u@h:5432/db?sslmode=disable&pass%77ord={encoded}",
        f"postgresql://u@h1:5432,h2:5433/db?password={encoded}&target_session_attrs=any",
        f"postgresql://u@[::1]:5432/db?password={encoded}",
        f"host=h port=5432 user=u password='{escaped}' dbname=db",
        f"host=h password = '{escaped}'",
        f"dbname=db password={escaped.replace(' ', chr(92) + ' ')} user=u",
    ]


@pytest.mark.parametrize("dsn", _libpq_forms())
def test_what_libpq_reads_as_the_password_is_masked(dsn: str) -> None:
    params = conninfo_to_dict(dsn)
    assert params["password"] == SECRET  # the form is one libpq accepts, with this password
    shown = redact(dsn)
    assert "Zq9" not in shown and quote(SECRET, safe="") not in shown
    assert conninfo_to_dict(shown)["password"] == MASK or "password" not in shown


@pytest.mark.parametrize(
    "url",
    [
        f"redis://h:6379/0?password={quote(SECRET, safe='')}",
        f"redis://h:6379/0?pass%77ord={quote(SECRET, safe='')}",
        f"redis://user:{quote(SECRET, safe='')}@h:6379/0",
        f"unix:///tmp/redis.sock?db=1&password={quote(SECRET, safe='')}",
    ],
)
def test_what_redis_py_reads_as_the_password_is_masked(url: str) -> None:
    assert parse_url(url)["password"] == SECRET  # type: ignore[no-untyped-call]
    shown = redact(url)
    assert "Zq9" not in shown
    assert parse_url(shown)["password"] == MASK  # type: ignore[no-untyped-call]


def test_what_pymongo_reads_as_the_password_is_masked() -> None:
    uri = f"mongodb://u:{quote(SECRET, safe='')}@h1:27017,h2:27018/db?replicaSet=rs"
    assert parse_uri(uri)["password"] == SECRET
    shown = redact(uri)
    assert "Zq9" not in shown
    assert parse_uri(shown)["password"] == MASK


@pytest.mark.parametrize(
    "dsn",
    [
        "host=h password=Zq9 s3cr3t",  # libpq quotes the piece after the space
        "postgresql://u:Zq9s3cr3t%zz@h/db",  # invalid percent-encoded token: quotes all of it
        "postgresql://u@h/db?password=Zq9s3cr3t&s3cr3t",  # no "=" in a query parameter
        "postgresql://u@h/db?password=Zq9%zzs3cr3t",
    ],
)
def test_libpq_parse_errors_lose_the_pieces_they_quote(dsn: str) -> None:
    with pytest.raises(psycopg.ProgrammingError) as info:
        conninfo_to_dict(dsn)
    message = str(info.value)
    assert "s3cr3t" in message or "Zq9" in message  # libpq quotes (a piece of) the password
    shown = redact(message, dsn)
    assert "s3cr3t" not in shown and "Zq9" not in shown, shown


def test_a_driver_message_about_a_dsn_loses_its_secret_values() -> None:
    dsn = "postgresql://u:Zq9%21s3cr3t@h/db"
    message = "could not use Zq9!s3cr3t (raw: Zq9%21s3cr3t) on h, user u"
    assert redact(message, dsn) == "could not use *** (raw: ***) on h, user u"


def test_names_that_name_secrets() -> None:
    secret = ["password", "PASSWORD", "sslpassword", "pass%77ord", "passwd", "pwd", "Pwd"]
    secret += ["oauth_client_secret", "sasl.password", "ssl.key.password", "ssl.key.pem"]
    secret += ["access_token", "api_key", "apiKey", "X-Amz-Signature", "sig", "key", "auth"]
    secret += ["tlsCertificateKeyFilePassword", "authMechanismProperties", "passphrase"]
    plain = ["sslkey", "passfile", "tlsCertificateKeyFile", "ssl.key.location", "authSource"]
    plain += ["user", "host", "sslmode", "sslcert", "ssl_keyfile", "dbname", "keepalives"]
    assert all(names_secret(name) for name in secret), [n for n in secret if not names_secret(n)]
    assert not any(names_secret(name) for name in plain), [n for n in plain if names_secret(n)]


def test_never_raises_on_odd_text() -> None:
    rng = random.Random(12)
    alphabet = "ab:/@?&;=%'\"\\ #[]password=postgresql://x"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        redact(text)
        redact(text, text)


def test_framework_errors_are_redacted_as_they_are_made() -> None:
    error = SourceFatal("PostgreSQL at postgresql://u@h/db?password=Zq9s3cr3t refused")
    assert "s3cr3t" not in str(error) and "password=***" in str(error)


def test_log_events_and_tracebacks_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", json=True)
    try:
        try:
            raise ValueError("bad dsn host=h password=Zq9s3cr3t")
        except ValueError:
            get_logger(dsn="redis://h/0?password=Zq9s3cr3t").exception(
                "source.retry",
                error="at postgresql://u:Zq9s3cr3t@h/db",
                nested={"a": ["pwd=Zq9s3cr3t"]},
            )
        sys.excepthook(ValueError, ValueError("postgresql://u@h/db?password=Zq9s3cr3t"), None)
    finally:
        structlog.reset_defaults()
        sys.excepthook = sys.__excepthook__
    err = capsys.readouterr().err
    assert "source.retry" in err and "ValueError" in err
    assert "s3cr3t" not in err, err


def test_fields_that_name_a_secret_are_masked_whole(capsys: pytest.CaptureFixture[str]) -> None:
    # A value no pattern recognises (a bare password) is still masked by its field's name; a
    # record's ``key`` stays readable.
    configure("info", json=True)
    try:
        get_logger().warning(
            "sink.auth_failed",
            password="Zq9s3cr3t",
            config={"sasl.password": "Zq9s3cr3t", "user": "app"},
            key='{"id": 42}',
        )
    finally:
        structlog.reset_defaults()
    err = capsys.readouterr().err
    assert "s3cr3t" not in err, err
    assert '"user": "app"' in err or '"user":"app"' in err
    assert "42" in err


def test_a_threads_uncaught_exception_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    configure("info", json=True)

    def fail() -> None:
        raise RuntimeError("lost postgresql://u@h/db?password=Zq9s3cr3t")

    try:
        thread = threading.Thread(target=fail, name="worker-1")
        thread.start()
        thread.join()
    finally:
        structlog.reset_defaults()
        sys.excepthook = sys.__excepthook__
        threading.excepthook = threading.__excepthook__
    err = capsys.readouterr().err
    assert "worker-1" in err and "RuntimeError" in err
    assert "s3cr3t" not in err, err
