"""``--where`` split into tokens as PostgreSQL's lexer splits it: separators and comments count
only outside string literals, dollar-quoted strings and quoted identifiers."""

from __future__ import annotations

import pytest

from cdc.contracts.errors import ConfigError, SourceFatal
from connectors.postgres.snapshot.where import check_where_text, problems, tokens


@pytest.mark.parametrize(
    "where",
    [
        "name = 'a;b'",
        "name = 'it''s; fine'",
        "name = E'a\\';b'",
        "name = $$a;b -- c /* d$$",
        "name = $tag$ a $$ ; b $tag$",
        '"we;ird" = 1 AND "x""--y" > 0',
        "U&'d\\0061t;' = name",
        "name LIKE 'a%' AND n BETWEEN 1 AND 5",
        "a$b$ = 1",  # an identifier may hold '$': no dollar quote starts inside it
        "x = 'a--b' OR y = '/*'",
        "(a OR b) AND c IN (1, 2) AND d = ')'",
    ],
)
def test_separators_inside_literals_are_accepted(where: str) -> None:
    assert problems(where) == []
    check_where_text(where)
    check_where_text(where, signal=True)


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("id > 5; DROP TABLE t", "';' ends a statement"),
        ("name = 'a'; DELETE FROM t", "';' ends a statement"),
        ("name = $$a$$; SELECT 1", "';' ends a statement"),
        ('"a;b" = 1;', "';' ends a statement"),
        ("id > 5 -- x", "comments"),
        ("id /* x */ > 5", "comments"),
        ("id > 5 /* /* nested */ ; */", "comments"),
        ("id > 5)", "unbalanced parentheses"),
        ("(id > 5", "unbalanced parentheses"),
        ("id > 5) OR (true", "unbalanced parentheses"),
        ("name = 'open", "ends inside"),
        ("name = $$open", "ends inside"),
        ('"open = 1', "ends inside"),
        ("id > 1 /* open", "ends inside"),
        ("   ", "empty"),
    ],
)
def test_what_is_not_one_expression_is_refused(where: str, reason: str) -> None:
    assert any(reason in p for p in problems(where)), problems(where)
    with pytest.raises(ConfigError) as raised:
        check_where_text(where)
    assert all(path == "--where" for path, _ in raised.value.problems)
    # Found in a hand-written signal: the same reasons fail the request, not the stream.
    with pytest.raises(SourceFatal) as in_signal:
        check_where_text(where, signal=True)
    assert str(in_signal.value) == "; ".join(problems(where))


def test_tokens_keep_literals_whole() -> None:
    found = tokens("a = 'x;y' AND $q$z$q$ = \"C\"")
    assert [(t.kind, t.text) for t in found] == [
        ("word", "a"),
        ("other", "="),
        ("string", "'x;y'"),
        ("word", "AND"),
        ("string", "$q$z$q$"),
        ("other", "="),
        ("identifier", '"C"'),
    ]
