"""sql_query's statement policy on its own (connectors/sql_policy.py): no database needed.

The examples pin what is accepted and what is refused, and why; the properties check, over
generated input, that the policy never lets through more than one read statement, never a
refused function, and never fails with anything but its own refusal.
"""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp
from sqlglot.tokens import TokenType

from connectors.sql_functions import DENIED, READ_FUNCTIONS, refusal
from connectors.sql_policy import ReadStatement, StatementRefused, check_read_statement

BACKENDS = {"postgresql": "postgres", "mysql": "mysql", "sqlite": "sqlite"}

ACCEPTED: dict[str, list[str]] = {
    "postgresql": [
        "SELECT 1",
        "SELECT",
        "select id, name from customers order by id",
        "SELECT * FROM orders WHERE total > 10 AND note IS NOT NULL LIMIT 5 OFFSET 2;",
        "SELECT c.name, count(o.id) AS n, sum(o.total) FROM customers c"
        " LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.name HAVING count(*) > 1"
        " ORDER BY n DESC NULLS LAST",
        "WITH big AS (SELECT * FROM orders WHERE total > 100) SELECT count(*) FROM big",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5)"
        " SELECT x FROM c",
        "SELECT id FROM orders UNION SELECT id FROM customers EXCEPT SELECT 3",
        "(SELECT 1)",
        "VALUES (1, 'a'), (2, 'b')",
        "TABLE customers",
        "SELECT DISTINCT ON (customer_id) customer_id, total FROM orders"
        " ORDER BY customer_id, total DESC",
        "SELECT row_number() OVER (PARTITION BY customer_id ORDER BY total DESC) FROM orders",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) FROM orders",
        "SELECT count(*) FILTER (WHERE total > 100) FROM orders",
        "SELECT date_trunc('month', now()) - interval '1 day', extract(year FROM now())",
        "SELECT name ILIKE 'a%', name ~* '^g', name SIMILAR TO 'A%' FROM customers",
        "SELECT coalesce(note, 'none'), nullif(total, 0), greatest(1, 2) FROM orders",
        "SELECT CASE WHEN total > 100 THEN 'big' ELSE 'small' END FROM orders",
        "SELECT total::text, '{1,2}'::int[], CAST(total AS numeric(10, 2)) FROM orders",
        "SELECT jsonb_build_object('a', 1) ->> 'a', json_agg(name) FROM customers",
        "SELECT * FROM generate_series(1, 3) AS g(n)",
        "SELECT x, i FROM unnest(ARRAY[1, 2]) WITH ORDINALITY AS u(x, i)",
        "SELECT * FROM orders FETCH FIRST 3 ROWS ONLY",
        "SELECT EXISTS (SELECT 1 FROM orders WHERE customer_id = c.id) FROM customers c",
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
        "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class",
        "SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_attribute LIMIT 1",
        "SELECT current_setting('search_path'), current_user, current_database()",
        "SELECT 'it''s', $$dollar$$, $q$quoted$q$, E'tab\\there', 'a' || 'b'",
        "SELECT E'\\', pg_sleep(1) --'",  # one string: the escaped quote does not end it
        "SELECT now() AT TIME ZONE 'UTC', to_hex(255), md5('x')",
        "SELECT a.x FROM (SELECT ROW(1, 2) AS x) a",
        "SELECT -- a comment\n 1 /* another */ + 2",
        "EXPLAIN SELECT * FROM orders",
        "EXPLAIN ANALYZE SELECT count(*) FROM orders",
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT 1",
        "SHOW search_path",
        "SHOW ALL",
    ],
    "mysql": [
        "SELECT id, name FROM customers ORDER BY id LIMIT 10",
        "SELECT `name`, COUNT(*) FROM `shop`.`orders` GROUP BY `name` WITH ROLLUP",
        "SELECT DATE_FORMAT(NOW(), '%Y-%m'), IFNULL(note, 'x'), IF(total > 1, 'a', 'b') FROM t",
        "SELECT GROUP_CONCAT(name ORDER BY name SEPARATOR ', ') FROM customers",
        "SELECT JSON_EXTRACT(doc, '$.a'), doc->>'$.b' FROM t",
        "SELECT * FROM orders USE INDEX (ix_orders_customer) WHERE customer_id = 1",
        "SELECT 'it''s', _utf8mb4'x', 0x1F, x'1F', @@version",
        "SHOW TABLES",
        "SHOW FULL COLUMNS FROM orders LIKE 'c%'",
        "SHOW GRANTS",
        "EXPLAIN FORMAT=JSON SELECT * FROM orders",
        "EXPLAIN ANALYZE SELECT * FROM orders",
    ],
    "sqlite": [
        "SELECT id, name FROM customers ORDER BY id",
        "SELECT replace(hex(zeroblob(10)), '0', 'x')",
        "SELECT group_concat(name, ', '), total(total) FROM customers, orders",
        "SELECT strftime('%Y', 'now'), date('now'), julianday('now')",
        "SELECT json_extract('{\"a\": 1}', '$.a'), typeof(1), ifnull(NULL, 2), iif(1, 2, 3)",
        "SELECT * FROM pragma_table_info('orders')",
        'SELECT [id], `name`, "email" FROM customers',
        "PRAGMA table_info(orders)",
        "PRAGMA main.table_info('orders')",
        "PRAGMA user_version",
        "EXPLAIN QUERY PLAN SELECT * FROM orders WHERE id = 1",
    ],
}

# (statement, a phrase the refusal must contain)
REFUSED: dict[str, list[tuple[str, str]]] = {
    "postgresql": [
        ("COPY (SELECT 1) TO PROGRAM 'touch /tmp/x'", "starts with COPY"),
        ("COPY orders TO '/tmp/file'", "starts with COPY"),
        ("SELECT pg_terminate_backend(123)", "terminates another session"),
        ("SELECT pg_cancel_backend(123)", "cancels another session"),
        ("SELECT pg_advisory_lock(1)", "advisory lock"),
        ("SELECT pg_try_advisory_xact_lock(1)", "advisory lock"),
        ("SELECT query_to_xml('DELETE FROM orders', true, false, '')", "runs the SQL text"),
        ("SELECT set_config('statement_timeout', '0', false)", "changes a setting"),
        ("SELECT * FROM orders FOR UPDATE", "FOR UPDATE"),
        ("SELECT * FROM orders FOR NO KEY UPDATE SKIP LOCKED", "FOR UPDATE"),
        ("SELECT (SELECT id FROM orders LIMIT 1 FOR SHARE)", "FOR SHARE"),
        ("WITH d AS (DELETE FROM orders RETURNING *) SELECT count(*) FROM d", "DELETE"),
        ("WITH i AS (INSERT INTO t (id) VALUES (9) RETURNING *) SELECT * FROM i", "INSERT"),
        ("WITH u AS (UPDATE orders SET total = 0 RETURNING *) SELECT 1", "UPDATE"),
        ("SELECT 1; DELETE FROM orders", "more than one"),
        ("SELECT 1; SELECT 2", "more than one"),
        ("SELECT 1 /* ; */ ; DELETE FROM orders", "more than one"),
        ("SELECT 1 -- comment\n; DELETE FROM orders", "more than one"),
        ("SELECT '\\', pg_sleep(1) --'", "pg_sleep"),
        ('SELECT U&"\\0070g_sleep"(1)', "not on sql_query's list"),
        ("SELECT U&'\\0070g_sleep'", "U&"),
        ('SELECT "pg_sleep"(1)', "pg_sleep"),
        ('SELECT "PG_SLEEP"(1)', "pg_sleep"),
        ("SELECT pg_catalog.pg_sleep(1)", "pg_sleep"),
        ("SELECT * FROM pg_catalog.pg_sleep(1)", "pg_sleep"),
        ("SELECT * FROM ROWS FROM (pg_sleep(1))", "pg_sleep"),
        ("SELECT (1::bigint).pg_advisory_lock", "pg_advisory_lock(x)"),
        ("SELECT t.pg_advisory_lock FROM (SELECT 1::bigint AS x) t", "pg_advisory_lock(x)"),
        ("SELECT (t.addr).city FROM t", "field selection"),
        ("WITH http_get(x) AS (SELECT 1) SELECT http_get('http://example.com')", "http_get"),
        ("WITH pg_sleep(x) AS (SELECT 1) SELECT pg_sleep(1)", "pg_sleep"),
        ("SELECT dblink_exec('dbname=x', 'DELETE FROM orders')", "outside the read-only"),
        ("SELECT * FROM dblink('dbname=x', 'SELECT 1') AS t(x int)", "dblink"),
        ("SELECT lo_import('/etc/passwd')", "large objects"),
        ("SELECT pg_read_file('/etc/passwd')", "reads a file"),
        ("SELECT pg_ls_dir('.')", "lists directories"),
        ("SELECT nextval('s')", "sequence"),
        ("SELECT txid_current()", "transaction ids"),
        ("SELECT pg_current_xact_id()", "transaction id"),
        ("SELECT pg_notify('c', 'x')", "notification"),
        ("SELECT pg_reload_conf()", "reloads"),
        ("SELECT pg_create_logical_replication_slot('s', 'test_decoding')", "replication"),
        ("SELECT ts_stat('SELECT 1')", "runs the SQL text"),
        ("SELECT table_to_xml('orders', true, false, '')", "runs SQL"),
        ("SELECT public.my_function(1)", "schema-qualified"),
        ("SELECT my_udf(1)", "read_functions setting"),
        ("DO $$ BEGIN DELETE FROM orders; END $$", "starts with DO"),
        ("CALL p()", "starts with CALL"),
        ("SET statement_timeout = 0", "starts with SET"),
        ("SET TRANSACTION READ WRITE", "starts with SET"),
        ("LOCK TABLE orders", "starts with LOCK"),
        ("LISTEN c", "starts with LISTEN"),
        ("NOTIFY c", "starts with NOTIFY"),
        ("SELECT 1 INTO t", "INTO"),
        ("SELECT * INTO newtable FROM orders", "INTO"),
        ("DELETE FROM orders", "sql_execute"),
        ("PREPARE p AS SELECT 1", "starts with PREPARE"),
        ("EXPLAIN ANALYZE DELETE FROM orders", "EXPLAIN only of a query"),
        ("EXPLAIN DELETE FROM orders", "EXPLAIN only of a query"),
        ("EXPLAIN ANALYZE SELECT pg_sleep(1)", "pg_sleep"),
        ("EXPLAIN (ANALYZE, FOO) SELECT 1", "unknown EXPLAIN option"),
        ("SHOW search_path; DELETE FROM orders", "more than one"),
        ("SHOW (SELECT 1)", "SHOW only of a setting"),
        ("LOAD 'plpgsql'", "starts with LOAD"),
        ("SELECT $1", "bind parameters"),
        ("SELECT a\x00b FROM t", "characters"),
        ("SELECT a\u200bb FROM t", "characters"),
        ("SELECT $1a$ , pg_sleep(1) , $1a$", "literal"),
        ("", "empty"),
        ("   ;  ", "empty"),
        ("SELECT 'unterminated", "could not read"),
        ("SELECT * FROM orders WHERE", "could not parse"),
        ("MERGE INTO orders USING customers ON true WHEN MATCHED THEN DELETE", "MERGE"),
    ],
    "mysql": [
        ("SELECT LOAD_FILE('/etc/passwd')", "reads a file"),
        ("SELECT SLEEP(10)", "denial of service"),
        ("SELECT BENCHMARK(1000000, MD5('x'))", "denial of service"),
        ("SELECT GET_LOCK('x', 10)", "named lock"),
        ("SELECT RELEASE_LOCK('x')", "named lock"),
        ("SELECT 1 INTO OUTFILE '/tmp/x'", "could not parse"),
        ("SELECT 1 INTO DUMPFILE '/tmp/x'", "could not parse"),
        ("SELECT 1 INTO @v", "INTO"),
        ("SELECT @v := 1", "assigns a variable"),
        ("SELECT * FROM t LOCK IN SHARE MODE", "locks rows"),
        ("SELECT * FROM t FOR UPDATE", "locks rows"),
        ("SELECT 'a\\' , SLEEP(1) -- '", "backslashes"),
        ('SELECT "x"', "single quotes"),
        ("SHOW TABLES WHERE SLEEP(1)", "no WHERE"),
        ("DO SLEEP(1)", "starts with DO"),
        ("SET @@global.read_only = 0", "starts with SET"),
        ("LOAD DATA INFILE '/etc/passwd' INTO TABLE t", "starts with LOAD"),
        ("SELECT mydb.myfunc(1)", "schema-qualified"),
        ("EXPLAIN FOR CONNECTION 5", "EXPLAIN only of a query"),
        ("DESCRIBE t", "sql_describe_table"),
        ("SELECT * FROM t PROCEDURE ANALYSE()", "could not parse"),
    ],
    "sqlite": [
        ("SELECT load_extension('/tmp/evil')", "native code"),
        ("ATTACH DATABASE '/tmp/x.db' AS x", "starts with ATTACH"),
        ("PRAGMA query_only = OFF", "read PRAGMAs"),
        ("PRAGMA main.query_only = 0", "read PRAGMAs"),
        ("PRAGMA writable_schema = 1", "read PRAGMAs"),
        ("SELECT fts3_tokenizer('simple')", "native"),
        ("WITH x AS (SELECT 1 AS id) INSERT INTO t (id) SELECT id FROM x", "Insert"),
        ("REPLACE INTO customers (id, name) VALUES (1, 'x')", "starts with REPLACE"),
        ("VACUUM INTO '/tmp/x.db'", "starts with VACUUM"),
        ("BEGIN IMMEDIATE", "starts with BEGIN"),
    ],
}


def _cases(table: dict[str, list[str]]) -> list[tuple[str, str]]:
    return [(backend, sql) for backend, statements in table.items() for sql in statements]


@pytest.mark.parametrize(("backend", "sql"), _cases(ACCEPTED))
def test_read_statements_are_accepted(backend: str, sql: str) -> None:
    statement = check_read_statement(sql, backend)
    assert statement.sql.strip()
    assert statement.kind in ("query", "explain", "show", "pragma")


@pytest.mark.parametrize(
    ("backend", "sql", "why"),
    [(backend, sql, why) for backend, cases in REFUSED.items() for sql, why in cases],
)
def test_everything_else_is_refused_saying_why(backend: str, sql: str, why: str) -> None:
    with pytest.raises(StatementRefused) as refused:
        check_read_statement(sql, backend)
    message = str(refused.value)
    assert message.startswith("refused: ")
    assert why.lower() in message.lower(), message


def test_a_write_is_sent_to_sql_execute() -> None:
    with pytest.raises(StatementRefused, match="read-only") as refused:
        check_read_statement("DELETE FROM orders", "postgresql")
    assert "sql_execute" in str(refused.value)


def test_what_runs_has_no_comments() -> None:
    # MySQL runs the text of /*! … */; PostgreSQL nests comments: neither reaches the server.
    assert check_read_statement("SELECT 1 /*! , SLEEP(10) */", "mysql").sql == "SELECT 1"
    assert check_read_statement("SELECT 1 /*!50000 , SLEEP(10) */", "mysql").sql == "SELECT 1"
    nested = "SELECT 1 /* /* nested */ ; DELETE FROM orders */"
    assert check_read_statement(nested, "postgresql").sql == "SELECT 1"
    assert check_read_statement("SELECT -- c\n 1 /* d */ + 2", "postgresql").sql == "SELECT\n1 + 2"


def test_unusual_whitespace_becomes_a_plain_space() -> None:
    """The server may not split tokens at a form feed or an ideographic space: it gets " "."""
    assert check_read_statement("SELECT 1\x0c, now()", "postgresql").sql == "SELECT 1 , now()"
    assert check_read_statement("SELECT 1\u3000, 2", "postgresql").sql == "SELECT 1 , 2"


def test_a_quote_never_touches_the_token_before_it() -> None:
    """``_utf8mb4'x'`` or ``U&"x"`` glued together are other tokens on the server."""
    statement = check_read_statement("SELECT _utf8mb4'x', ('y'), 'z'::text", "mysql")
    assert statement.sql == "SELECT _utf8mb4 'x', ('y'), 'z'::text"


@pytest.mark.parametrize(("backend", "sql"), _cases(ACCEPTED))
def test_what_runs_is_what_was_written_less_comments(backend: str, sql: str) -> None:
    statement = check_read_statement(sql, backend)
    if "--" in sql or "/*" in sql or "_utf8mb4'" in sql or statement.kind == "explain":
        return
    assert _normalised(statement.sql) == _normalised(sql)


def _normalised(sql: str) -> str:
    return " ".join(sql.strip().rstrip(";").split())


def test_read_functions_setting_allows_more_but_never_a_refused_one() -> None:
    with pytest.raises(StatementRefused, match="read_functions"):
        check_read_statement("SELECT my_report(2024), reports.total(1)", "postgresql")
    allowed = ["my_report", "reports.total"]
    check_read_statement(
        "SELECT my_report(2024), reports.total(1)", "postgresql", read_functions=allowed
    )
    for name in ("pg_sleep", "dblink_exec", "pg_advisory_lock"):
        with pytest.raises(StatementRefused, match="is refused"):
            check_read_statement(f"SELECT {name}(1)", "postgresql", read_functions=[name])


def test_the_allowlists_refuse_nothing_they_list() -> None:
    """Each listed function is accepted as a call, and none of them is also refused."""
    keyword_syntax = {"cast", "extract", "position", "overlay", "convert", "trim", "substring"}
    for backend, dialect in BACKENDS.items():
        names = READ_FUNCTIONS[dialect]
        assert not {name for name in names if refusal(name)}
        for name in sorted(names - keyword_syntax):
            message = _refusal_of(f"SELECT {name}(1)", backend)
            # A few names are keywords the parser does not read as a call with one
            # argument; what matters is that no function check refused them.
            assert message is None or "could not parse" in message, (name, message)


def _refusal_of(sql: str, backend: str) -> str | None:
    try:
        check_read_statement(sql, backend)
    except StatementRefused as exc:
        return str(exc)
    return None


def test_unsupported_backend_is_refused() -> None:
    with pytest.raises(StatementRefused, match="cannot check statements for mssql"):
        check_read_statement("SELECT 1", "mssql")


# ---------------------------------------------------------------- properties

FAST = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

SQL_WORDS = [
    "SELECT", "FROM", "WHERE", "WITH", "AS", "DELETE", "INSERT", "INTO", "UPDATE", "SET",
    "FOR", "UNION", "COPY", "TO", "PROGRAM", "EXPLAIN", "ANALYZE", "SHOW", "PRAGMA", "DO",
    "VALUES", "orders", "t", "x", "pg_sleep", "pg_advisory_lock", "count", "now", "U&",
    "E", "$$", "$a$", "'", '"', "`", "(", ")", ",", ";", ".", "::", "*", "--", "/*", "*/",
    "/*!", "\n", " ", "\\", "1", "'s'", "LIMIT", "RETURNING", "LATERAL", "pg_catalog",
]  # fmt: skip


def _outside_plain_strings(sql: str, dialect: str) -> str:
    kept, last = [], 0
    for token in sqlglot.tokenize(sql, read=dialect):
        plain = not {"'", '"', "\\", "$"} & set(sql[token.start + 1 : token.end])
        if token.token_type == TokenType.STRING and plain:
            kept.append(sql[last : token.start])
            last = token.end + 1
    kept.append(sql[last:])
    return "".join(kept)


def _read_tree_invariants(backend: str, statement: ReadStatement) -> None:
    """What an accepted statement must be, checked again from scratch on what runs."""
    # No comment marker survives, except as the text of a plain string literal
    # (SELECT '--'): one without quotes or backslashes inside, which every database reads
    # the same way as the checker.
    outside = _outside_plain_strings(statement.sql, BACKENDS[backend])
    assert "/*" not in outside and "--" not in outside, statement.sql
    if statement.kind in ("show", "pragma"):
        assert ";" not in statement.sql and not statement.query
        return
    assert statement.sql.endswith(statement.query)
    trees = [tree for tree in sqlglot.parse(statement.query, read=BACKENDS[backend]) if tree]
    assert len(trees) == 1, statement.query
    tree = trees[0]
    assert isinstance(tree, exp.Select | exp.SetOperation | exp.Subquery | exp.Values)
    for node in tree.walk():
        assert not isinstance(node, exp.DML | exp.Into | exp.Lock | exp.Command), statement
        if isinstance(node, exp.Anonymous):
            assert refusal(node.name.lower()) is None, statement


@FAST
@given(
    backend=st.sampled_from(list(BACKENDS)),
    text=st.one_of(
        st.text(max_size=200),
        st.lists(st.sampled_from(SQL_WORDS), max_size=30).map(" ".join),
        st.lists(st.sampled_from(SQL_WORDS), max_size=30).map("".join),
    ),
)
def test_any_text_is_accepted_as_one_read_or_refused(backend: str, text: str) -> None:
    try:
        statement = check_read_statement(text, backend)
    except StatementRefused:
        return
    _read_tree_invariants(backend, statement)
    # What runs is itself accepted, unchanged: checking it again finds nothing new.
    assert check_read_statement(statement.sql, backend).sql == statement.sql


DENIED_CALLS = [f"{name}(1)" for name in sorted(DENIED)] + [
    "pg_advisory_lock(1)",
    "pg_try_advisory_lock_shared(1)",
    "dblink('x', 'y')",
    "lo_unlink(1)",
    "txid_current()",
    "pg_create_restore_point('x')",
    "database_to_xml(true, true, '')",
]


def _spellings(call: str) -> st.SearchStrategy[str]:
    name, _, rest = call.partition("(")
    return st.sampled_from(
        [
            call,
            call.upper(),
            f'"{name}"({rest}',
            f"pg_catalog.{call}",
            f"{name} ({rest}",
            f"{name}/* hidden */({rest}",
        ]
    )


@FAST
@given(
    backend=st.sampled_from(list(BACKENDS)),
    query=st.sampled_from([sql for sql in ACCEPTED["postgresql"] if sql.startswith("SELECT 1")]),
    call=st.sampled_from(DENIED_CALLS).flatmap(_spellings),
    where=st.sampled_from(["select", "where", "subquery", "cte", "from"]),
)
def test_a_refused_function_spliced_anywhere_is_refused(
    backend: str, query: str, call: str, where: str
) -> None:
    spliced = {
        "select": f"SELECT {call}, 1",
        "where": f"SELECT 1 FROM t WHERE {call} IS NOT NULL",
        "subquery": f"SELECT (SELECT {call}) AS x",
        "cte": f"WITH c AS (SELECT {call} AS v) SELECT v FROM c",
        "from": f"SELECT * FROM {call} AS f",
    }[where]
    with pytest.raises(StatementRefused):
        check_read_statement(spliced, backend)
    with pytest.raises(StatementRefused):
        check_read_statement(f"{query} UNION ALL {spliced}", backend)


SECOND_STATEMENTS = [
    "DELETE FROM orders",
    "DROP TABLE orders",
    "SELECT 2",
    "COPY orders TO '/tmp/x'",
    "SET statement_timeout = 0",
]


@FAST
@given(
    backend=st.sampled_from(list(BACKENDS)),
    query=st.sampled_from(ACCEPTED["sqlite"][:5] + ACCEPTED["mysql"][:3]),
    second=st.sampled_from(SECOND_STATEMENTS),
    glue=st.sampled_from([";", "; ", ";\n", " ; -- x\n", "/* c */;", ";/* c */ "]),
)
def test_a_second_statement_is_refused(backend: str, query: str, second: str, glue: str) -> None:
    with pytest.raises(StatementRefused):
        check_read_statement(f"{query}{glue}{second}", backend)


@FAST
@given(
    query=st.sampled_from([sql for sql in ACCEPTED["postgresql"] if "--" not in sql]),
    comment=st.sampled_from(["/* c */", "/* ; DELETE FROM orders */", "-- DELETE\n"]),
    data=st.data(),
)
def test_comments_between_tokens_change_nothing_that_runs(
    query: str, comment: str, data: st.DataObject
) -> None:
    """A comment at any space is removed; the statement that runs is the same."""
    baseline = check_read_statement(query, "postgresql").sql
    spaces = [i for i, c in enumerate(query) if c == " " and not _inside_quotes(query, i)]
    if not spaces:
        return
    at = data.draw(st.sampled_from(spaces))
    commented = query[:at] + " " + comment + " " + query[at + 1 :]
    try:
        statement = check_read_statement(commented, "postgresql")
    except StatementRefused:
        return  # e.g. inside "PARTITION BY", which sqlglot then reads as two words: fail closed
    assert _normalised(statement.sql) == _normalised(baseline)


def _inside_quotes(sql: str, index: int) -> bool:
    before = sql[:index]
    return before.count("'") % 2 == 1 or before.count("$") % 2 == 1 or before.count('"') % 2 == 1


LEAVES = ["1", "'a'", "'it''s'", "id", "o.name", "NULL", "total * 2", "now()", "TRUE"]
CALLS = ["lower", "upper", "coalesce", "length", "abs", "round", "count", "max", "md5"]
OPERATORS = ["+", "-", "=", "<", "AND", "OR", "||", "IS DISTINCT FROM"]


def _expressions() -> st.SearchStrategy[str]:
    return st.recursive(
        st.sampled_from(LEAVES),
        lambda inner: st.one_of(
            st.tuples(st.sampled_from(CALLS), inner).map(lambda c: f"{c[0]}({c[1]})"),
            st.tuples(inner, st.sampled_from(OPERATORS), inner).map(
                lambda c: f"({c[0]} {c[1]} {c[2]})"
            ),
            inner.map(lambda e: f"(SELECT {e})"),
            inner.map(lambda e: f"CASE WHEN {e} IS NULL THEN 0 ELSE 1 END"),
            inner.map(lambda e: f"EXISTS (SELECT 1 FROM orders WHERE id = {e})"),
        ),
        max_leaves=8,
    )


def _query(columns: list[str], where: str, case: str) -> str:
    text = f"SELECT {', '.join(columns)} FROM orders o WHERE {where} LIMIT 5"
    return text.lower() if case == "lower" else text


@FAST
@given(
    backend=st.sampled_from(list(BACKENDS)),
    columns=st.lists(_expressions(), min_size=1, max_size=3),
    where=_expressions(),
    case=st.sampled_from(["as written", "lower"]),
)
def test_generated_selects_are_accepted_as_they_are(
    backend: str, columns: list[str], where: str, case: str
) -> None:
    query = _query(columns, where, case)
    statement = check_read_statement(query, backend)
    assert statement.sql == query  # nothing to remove, nothing changed
    _read_tree_invariants(backend, statement)


@FAST
@given(
    backend=st.sampled_from(list(BACKENDS)),
    columns=st.lists(_expressions(), min_size=1, max_size=3),
    where=_expressions(),
    call=st.sampled_from(DENIED_CALLS).flatmap(_spellings),
    spot=st.integers(min_value=0, max_value=3),
    wrap=st.sampled_from(["{call}", "({e} + {call})", "coalesce({e}, {call})", "(SELECT {call})"]),
)
def test_generated_selects_with_a_refused_function_are_refused(
    backend: str, columns: list[str], where: str, call: str, spot: int, wrap: str
) -> None:
    parts = [*columns, where]
    index = spot % len(parts)
    parts[index] = wrap.format(e=parts[index], call=call)
    with pytest.raises(StatementRefused):
        check_read_statement(_query(parts[:-1], parts[-1], "as written"), backend)
