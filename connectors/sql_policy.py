"""What ``sql_query`` may run: one read statement, checked on sqlglot's parse of it.

``sql_query`` is a read tool: it runs without a person's approval and stays available in
the organisation's read-only mode. The database's read-only transaction (and SQLite's
authorizer) stop writes to tables, but not everything a SELECT can do: a function call
can terminate another session, take an advisory lock that outlives the query, sleep,
change a setting, read server files, or run SQL given as text (``query_to_xml``,
``dblink``) outside the transaction. This module is the layer that stops those, before
anything reaches the database. It does not replace the database's layers; the connector
keeps them all.

What is accepted, decided on sqlglot's tokens and parse tree in the connection's dialect
(never by matching the text):

- exactly one statement (trailing semicolons are fine);
- a query: SELECT, WITH … SELECT, VALUES, TABLE, a set operation of those, with no
  data-modifying statement anywhere in the tree (``WITH d AS (DELETE … RETURNING *)``),
  no ``INTO``, no row locks (``FOR UPDATE``/``FOR SHARE``), no variable assignment and
  no bind parameters;
- ``EXPLAIN`` with its options, of a query this module accepts. ``EXPLAIN ANALYZE``
  executes its statement, so EXPLAIN of anything else is refused, even without ANALYZE:
  one rule ("EXPLAIN X runs when X would"), and planning a write still takes its locks;
- ``SHOW`` of a setting (PostgreSQL) or a MySQL ``SHOW`` without ``WHERE`` (which takes an
  expression), and, on SQLite, the read PRAGMAs the authorizer allows.

Anything else is refused, and so is whatever sqlglot cannot tokenize or parse: fail closed.

Functions: an allowlist (``connectors/sql_functions.py``). Every ``name(`` in the token
stream and every function in the tree must be a known built-in that only computes or
reads, a word of SQL's grammar, a type, or a column list of an alias declared in the
statement; a few names are refused outright with the reason. An allowlist, not a
denylist, because the dangerous set is open-ended: extensions add functions that call out
of the network or open their own transactions, and a denylist misses each new one. The
price is that an unusual built-in is refused until it is added to the list (or allowed
with the connector's ``read_functions`` setting). Schema-qualified calls are refused
except ``pg_catalog.<allowed name>`` and what that setting names. PostgreSQL also calls
a function through attribute notation (``(1).pg_advisory_lock`` is
``pg_advisory_lock(1)``): field selection on an expression is refused, and so is
``x.name`` when ``name`` is a refused function.

What runs is rebuilt from the checked tokens: comments are removed (MySQL runs the text
of ``/*! … */`` comments, which sqlglot, rightly for a parser, skips) and a string or
quoted identifier never touches the token before it (so ``U&"…"`` cannot become one
token on the server when it was three for sqlglot). String tokens are checked against
each database's own lexical rules (PostgreSQL's ``standard_conforming_strings`` is forced
on by the connector; MySQL strings with backslashes or double quotes, whose meaning
depends on the server's SQL mode, are refused), so the database splits the text into the
same tokens the policy checked.
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ErrorLevel, ParseError
from sqlglot.tokens import Token, Tokenizer, TokenType

from bot.engine import ToolError

from .sql_functions import GRAMMAR_WORDS, READ_FUNCTIONS, TYPE_WORDS, refusal
from .sql_sqlite import READ_PRAGMAS, READ_PRAGMAS_WITH_ARGUMENT

MAX_SQL_CHARS = 100_000

# SQLAlchemy backend name → sqlglot dialect. MariaDB reads as MySQL.
DIALECTS: Mapping[str, str] = {
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlite": "sqlite",
}

WRITE_HINT = "Use sql_execute for INSERT, UPDATE, DELETE or schema changes."
READ_FORMS = "one SELECT, WITH … SELECT, EXPLAIN or SHOW statement"
FUNCTION_HINT = (
    "Rewrite the query with built-in functions; an admin can allow a read-only function"
    " with the SQL connector's read_functions setting."
)

_QUERY_START = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "("})
_EXPLAIN_WORDS: Mapping[str, frozenset[str]] = {
    "postgres": frozenset({"EXPLAIN"}),
    "mysql": frozenset({"EXPLAIN", "DESCRIBE", "DESC"}),
    "sqlite": frozenset({"EXPLAIN"}),
}
_POSTGRES_EXPLAIN_OPTIONS = frozenset(
    {
        "ANALYZE", "ANALYSE", "VERBOSE", "COSTS", "SETTINGS", "GENERIC_PLAN", "BUFFERS",
        "SERIALIZE", "WAL", "TIMING", "SUMMARY", "MEMORY", "FORMAT",
    }
)  # fmt: skip
_POSTGRES_EXPLAIN_VALUES = frozenset(
    {"TRUE", "FALSE", "ON", "OFF", "1", "0", "TEXT", "XML", "JSON", "YAML", "NONE", "BINARY"}
)
_MYSQL_EXPLAIN_FORMATS = frozenset({"TRADITIONAL", "JSON", "TREE"})

# Parse-tree nodes that are neither functions nor operators and that a read may contain.
_STRUCTURE: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, name)
    for name in (
        "Select", "Union", "Intersect", "Except", "Subquery", "With", "CTE", "From", "Join",
        "Where", "Group", "Having", "Order", "Ordered", "Limit", "Offset", "Fetch", "Alias",
        "Aliases", "TableAlias", "Table", "Identifier", "Star", "Distinct", "Tuple",
        "Values", "Lateral", "WindowSpec", "WithinGroup", "DataType", "DataTypeParam",
        "Interval", "IntervalSpan", "AtTimeZone", "Var", "Slice", "Cube", "Rollup",
        "GroupingSets", "TableSample", "IgnoreNulls", "RespectNulls", "RecursiveWithSearch",
        "PseudoType", "ObjectIdentifier", "National", "Introducer", "JSONPath",
        "JSONPathKey", "JSONPathRoot", "JSONPathSubscript", "JSONPathSelector",
        "JSONPathSlice", "JSONPathWildcard", "JSONPathUnion", "JSONPathFilter",
        "JSONPathScript", "JSONPathRecursive", "JSONColumnDef", "JSONSchema", "JSONValue",
        "FormatJson", "XMLNamespace", "XMLKeyValueOption", "IndexTableHint", "ColumnDef",
        "Schema", "Qualify", "Heredoc", "CharacterSet", "Collate", "OnCondition",
        "ColumnPrefix", "MatchAgainst", "Filter", "Window", "Paren", "LimitOptions",
    )
    if hasattr(exp, name)
)  # fmt: skip
# Functions the tree refuses by their class: they call no "name(" the token check sees.
_REFUSED_FUNCTIONS: Mapping[str, str] = {
    "NextValueFor": "NEXT VALUE FOR advances a sequence",
    "ReadCSV": "reads a file",
    "ReadParquet": "reads a file",
}
_QUOTED = frozenset(
    {
        TokenType.STRING, TokenType.IDENTIFIER, TokenType.NATIONAL_STRING,
        TokenType.BYTE_STRING, TokenType.BIT_STRING, TokenType.HEX_STRING,
        TokenType.HEREDOC_STRING, TokenType.RAW_STRING, TokenType.UNICODE_STRING,
    }
)  # fmt: skip
_WHITESPACE = frozenset(" \t\r\n")


class StatementRefused(ToolError):
    """sql_query's policy refused a statement; the message says why and what to do instead."""

    def __init__(self, reason: str, hint: str = WRITE_HINT) -> None:
        super().__init__(f"refused: {reason}. {hint}".strip())


@dataclasses.dataclass(frozen=True, slots=True)
class ReadStatement:
    kind: Literal["query", "explain", "show", "pragma"]
    sql: str  # what runs: the checked tokens, comments removed
    query: str = ""  # the query inside (the whole of sql for a query, after EXPLAIN's options)


def check_read_statement(
    sql: str, backend: str, *, read_functions: Collection[str] = ()
) -> ReadStatement:
    """The statement ``sql_query`` may run for ``sql``, or ``StatementRefused`` saying why.

    ``backend`` is SQLAlchemy's backend name (``postgresql``, ``mysql``, ``mariadb``,
    ``sqlite``); ``read_functions`` are functions an admin declared read-only, by name or
    as ``schema.name``.
    """
    dialect = DIALECTS.get(backend)
    if dialect is None:
        raise StatementRefused(f"sql_query cannot check statements for {backend}", hint="")
    return _Checker(dialect, read_functions).check(sql)


class _Checker:
    def __init__(self, dialect: str, read_functions: Collection[str]) -> None:
        self.dialect = dialect
        extra = {name.strip().lower() for name in read_functions if name.strip()}
        self.functions = READ_FUNCTIONS[dialect] | {n for n in extra if "." not in n}
        self.qualified_functions = frozenset(n for n in extra if "." in n)

    def check(self, sql: str) -> ReadStatement:
        if len(sql) > MAX_SQL_CHARS:
            raise StatementRefused(
                f"the statement is longer than {MAX_SQL_CHARS} characters", hint=""
            )
        tokens = self._single_statement(self._tokenize(sql))
        for token in tokens:
            self._check_lexeme(sql, token)
        word = tokens[0].text.upper()
        if word in _EXPLAIN_WORDS[self.dialect]:
            return self._explain(sql, tokens)
        if word == "SHOW" and self.dialect != "sqlite":
            return ReadStatement("show", self._show(sql, tokens))
        if word == "PRAGMA" and self.dialect == "sqlite":
            return ReadStatement("pragma", self._pragma(sql, tokens))
        query = self._query(sql, tokens)
        return ReadStatement("query", query, query)

    # ------------------------------------------------------------ tokens

    def _tokenize(self, sql: str) -> list[Token]:
        try:
            return _tokenizer(self.dialect).tokenize(sql)
        except Exception as exc:  # sqlglot's own errors, or a recursion limit: fail closed
            raise StatementRefused(
                f"sql_query could not read this as SQL ({_short(exc)})",
                hint="Check the quoting and write " + READ_FORMS + ".",
            ) from exc

    def _single_statement(self, tokens: list[Token]) -> list[Token]:
        while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
            tokens = tokens[:-1]
        if not tokens:
            raise StatementRefused("the SQL statement is empty", hint="")
        if any(token.token_type == TokenType.SEMICOLON for token in tokens):
            raise StatementRefused(
                "sql_query runs one statement at a time, and this text has more than one",
                hint="Send each statement in its own call.",
            )
        return tokens

    def _check_lexeme(self, sql: str, token: Token) -> None:
        """The database must read ``token`` as the one token sqlglot read."""
        source = sql[token.start : token.end + 1]
        kind = token.token_type
        if kind not in _QUOTED:
            # Only ASCII spaces inside (in multi-word keywords such as ORDER BY): other
            # whitespace or control characters split tokens differently on the server.
            if any(_unusual(c) for c in source) or "/*" in source or "--" in source:
                raise StatementRefused(
                    f"the statement contains characters sql_query does not accept"
                    f" around {source[:40]!r}",
                    hint="Use plain spaces and no control characters.",
                )
            return
        if not _well_formed(source, kind, self.dialect):
            raise StatementRefused(
                f"sql_query does not accept the literal {source[:60]!r} here",
                hint=_LITERAL_HINT.get(self.dialect, ""),
            )

    # ------------------------------------------------------------ statements

    def _query(self, sql: str, tokens: Sequence[Token]) -> str:
        word = tokens[0].text.upper()
        if word not in _QUERY_START:
            raise StatementRefused(
                f"sql_query is read-only and runs {READ_FORMS}; this one starts with {word[:30]}"
            )
        try:
            parser = _dialect(self.dialect).parser(error_level=ErrorLevel.IMMEDIATE)
            trees = [tree for tree in parser.parse(list(tokens), sql) if tree is not None]
        except Exception as exc:
            raise StatementRefused(
                f"sql_query could not parse this as a read statement ({_short(exc)})",
                hint="Fix the SQL; sql_query runs " + READ_FORMS + ".",
            ) from exc
        if len(trees) != 1:
            raise StatementRefused("sql_query runs exactly one statement", hint="")
        tree = trees[0]
        if not isinstance(tree, exp.Select | exp.SetOperation | exp.Subquery | exp.Values):
            raise StatementRefused(
                f"sql_query is read-only and runs {READ_FORMS};"
                f" this parses as {type(tree).__name__}"
            )
        for node in tree.walk():
            if isinstance(node, exp.Expression):  # walk() also yields sqlglot's bare Expr
                self._check_node(node)
        self._check_calls(tokens, _column_list_aliases(tree))
        return _emit(sql, tokens)

    def _explain(self, sql: str, tokens: list[Token]) -> ReadStatement:
        if self.dialect == "postgres":
            prefix, rest = _postgres_explain_options(tokens)
        elif self.dialect == "mysql":
            prefix, rest = _mysql_explain_options(tokens)
        else:
            words = [t.text.upper() for t in tokens[1:3]]
            count = 3 if words == ["QUERY", "PLAN"] else 1
            prefix, rest = " ".join(t.text for t in tokens[:count]), tokens[count:]
        if not rest or rest[0].text.upper() not in _QUERY_START:
            raise StatementRefused(
                "sql_query runs EXPLAIN only of a query it would run itself (SELECT,"
                " WITH … SELECT, VALUES); EXPLAIN ANALYZE executes its statement",
                hint="To describe a table, use sql_describe_table. " + WRITE_HINT,
            )
        query = self._query(sql, rest)
        return ReadStatement("explain", f"{prefix} {query}", query)

    def _show(self, sql: str, tokens: list[Token]) -> str:
        rest = tokens[1:]
        if self.dialect == "postgres":
            plain = all(_bare_word(t) or t.token_type == TokenType.DOT for t in rest)
            if not rest or len(rest) > 5 or not plain:
                raise StatementRefused(
                    "sql_query runs SHOW only of a setting name (SHOW search_path, SHOW ALL)",
                    hint="",
                )
        else:
            allowed = {TokenType.DOT, TokenType.COMMA, TokenType.STRING, TokenType.IDENTIFIER}
            words = {t.text.upper() for t in rest if _bare_word(t)}
            plain = all(_bare_word(t) or t.token_type in allowed for t in rest)
            if not rest or not plain or "WHERE" in words:
                raise StatementRefused(
                    "sql_query runs SHOW with names and LIKE 'pattern' only (no WHERE,"
                    " no parentheses)",
                    hint="Filter with SHOW … LIKE, or query information_schema with SELECT.",
                )
        return _emit(sql, tokens)

    def _pragma(self, sql: str, tokens: list[Token]) -> str:
        rest = tokens[1:]
        if len(rest) >= 2 and rest[1].token_type == TokenType.DOT:
            if not _name_token(rest[0]):
                rest = []  # refused below
            rest = rest[2:]
        name = rest[0].text.lower() if rest and _bare_word(rest[0]) else ""
        argument = rest[1:]
        ok = name in READ_PRAGMAS and (
            not argument
            or (
                name in READ_PRAGMAS_WITH_ARGUMENT
                and len(argument) == 3
                and argument[0].token_type == TokenType.L_PAREN
                and argument[2].token_type == TokenType.R_PAREN
                and (
                    _name_token(argument[1])
                    or argument[1].token_type in (TokenType.STRING, TokenType.NUMBER)
                )
            )
        )
        if not ok:
            raise StatementRefused(
                "sql_query runs only the read PRAGMAs (such as PRAGMA table_info(t)),"
                " never one that sets a value"
            )
        return _emit(sql, tokens)

    # ------------------------------------------------------------ the tree

    def _check_node(self, node: exp.Expression) -> None:
        if isinstance(node, exp.DML):
            raise StatementRefused(
                f"the query contains a data-modifying statement ({node.key.upper()}), e.g."
                " WITH d AS (DELETE … RETURNING *) SELECT …; sql_query is read-only"
            )
        if isinstance(node, exp.Into):
            raise StatementRefused(
                "SELECT … INTO writes a table, a file or variables; sql_query is read-only"
            )
        if isinstance(node, exp.Lock):
            raise StatementRefused(
                "SELECT … FOR UPDATE / FOR SHARE locks rows; sql_query is read-only",
                hint="Remove the locking clause.",
            )
        if isinstance(node, exp.Func):
            self._check_function_node(node)
        elif isinstance(node, exp.PropertyEQ):
            raise StatementRefused("the query assigns a variable (:=)", hint="")
        elif isinstance(node, exp.Placeholder | exp.Parameter):
            raise StatementRefused(
                "sql_query has no bind parameters or variables",
                hint="Write literal values inline.",
            )
        elif not isinstance(node, (exp.Condition, *_STRUCTURE)):
            raise StatementRefused(
                f"the query uses a construct sql_query cannot check ({type(node).__name__})",
                hint="Rewrite it with plainer SQL (SELECT, JOIN, WHERE, GROUP BY, ORDER BY).",
            )

    def _check_function_node(self, node: exp.Func) -> None:
        why = _REFUSED_FUNCTIONS.get(type(node).__name__)
        if why is not None:
            raise StatementRefused(f"{node.sql_name()} is refused: it {why}", hint="")
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            self._check_function_name(name, qualifier=_tree_qualifier(node))

    def _check_function_name(self, name: str, *, qualifier: str | None) -> None:
        why = refusal(name)
        if why is not None:
            raise StatementRefused(
                f"function {name}() is refused: it {why}",
                hint="sql_query only reads; rewrite the query without it.",
            )
        if qualifier is not None:
            if f"{qualifier}.{name}" in self.qualified_functions:
                return
            if not (
                self.dialect == "postgres" and qualifier == "pg_catalog" and name in self.functions
            ):
                raise StatementRefused(
                    f"the schema-qualified call {qualifier}.{name}() is not one sql_query"
                    " knows to be read-only",
                    hint=FUNCTION_HINT,
                )
            return
        if name not in self.functions:
            raise StatementRefused(
                f"function {name}() is not on sql_query's list of read-only functions",
                hint=FUNCTION_HINT,
            )

    # ------------------------------------------------------------ the tokens, again

    def _check_calls(self, tokens: Sequence[Token], aliases: Counter[str]) -> None:
        """Every ``name(`` and every keyword of a write, whatever tree sqlglot made of them."""
        for index, token in enumerate(tokens):
            following = tokens[index + 1] if index + 1 < len(tokens) else None
            previous = tokens[index - 1] if index else None
            word = token.text.upper() if _bare_word(token) else ""
            opens = following is not None and following.token_type == TokenType.L_PAREN
            if word in ("INSERT", "UPDATE", "DELETE", "MERGE") and not opens:
                raise StatementRefused(f"the query contains {word}; sql_query is read-only")
            if word in ("INTO", "LOCK"):
                raise StatementRefused(
                    f"the query contains {word} (a write or a lock); sql_query is read-only"
                )
            locking = ("UPDATE", "SHARE", "NO", "KEY")
            if word == "FOR" and following is not None and following.text.upper() in locking:
                raise StatementRefused("SELECT … FOR UPDATE / FOR SHARE locks rows")
            if opens and _name_token(token):
                self._check_call_token(tokens, index, aliases)
            elif (
                self.dialect == "postgres"
                and token.token_type == TokenType.DOT
                and following is not None
            ):
                self._check_field(previous, following)

    def _check_call_token(self, tokens: Sequence[Token], index: int, aliases: Counter[str]) -> None:
        token = tokens[index]
        name = token.text.lower()
        qualified = index >= 2 and tokens[index - 1].token_type == TokenType.DOT
        if qualified:
            qualifier = tokens[index - 2].text.lower()
            self._check_function_name(name, qualifier=qualifier)
            return
        why = refusal(name)
        if why is None and aliases[name] > 0:
            aliases[name] -= 1  # "alias(column, …)": a declaration, not a call
            return
        keyword = token.token_type != TokenType.IDENTIFIER
        if why is None and keyword and (name in GRAMMAR_WORDS or name in TYPE_WORDS):
            return
        self._check_function_name(name, qualifier=None)

    def _check_field(self, previous: Token | None, field: Token) -> None:
        """PostgreSQL reads ``x.f`` as ``f(x)`` when x has no field f."""
        if not _name_token(field):
            return
        why = refusal(field.text.lower())
        if why is not None:
            raise StatementRefused(
                f"x.{field.text.lower()} calls the function {field.text.lower()}(x) in"
                f" PostgreSQL, which is refused: it {why}",
                hint="sql_query only reads.",
            )
        if previous is not None and previous.token_type == TokenType.R_PAREN:
            raise StatementRefused(
                f"field selection on an expression ((…).{field.text}) can call a function in"
                " PostgreSQL, so sql_query does not accept it",
                hint="Select the field in a subquery, or use ->> for JSON.",
            )


# ---------------------------------------------------------------- helpers


@functools.cache
def _dialect(name: str) -> Dialect:
    return Dialect.get_or_raise(name)


@functools.cache
def _tokenizer_class(name: str) -> type[Tokenizer]:
    # sqlglot reads the rest of a "command" (EXPLAIN, SHOW, …) as one string, up to the
    # first semicolon even inside quotes; without commands every word is its own token.
    base = _dialect(name).tokenizer_class
    return type(f"{base.__name__}WithoutCommands", (base,), {"COMMANDS": set()})


def _tokenizer(name: str) -> Tokenizer:
    return _tokenizer_class(name)(dialect=_dialect(name))


def _short(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "the statement is nested too deeply"
    errors = getattr(exc, "errors", None)
    if isinstance(exc, ParseError) and errors:
        first = errors[0]
        where = f" at line {first.get('line')}, column {first.get('col')}"
        return f"{first.get('description') or 'syntax error'}{where}"
    text = str(exc).replace("\x1b[4m", "").replace("\x1b[0m", "").strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def _unusual(character: str) -> bool:
    if character in _WHITESPACE:
        return False
    return character.isspace() or unicodedata.category(character).startswith("C")


def _bare_word(token: Token) -> bool:
    """An unquoted word: a keyword or a plain name."""
    text = token.text
    return (
        token.token_type not in _QUOTED
        and bool(text)
        and (text[0].isalpha() or text[0] == "_")
        and all(c.isalnum() or c in "_$ " for c in text)
    )


def _name_token(token: Token) -> bool:
    return token.token_type == TokenType.IDENTIFIER or _bare_word(token)


def _tree_qualifier(node: exp.Func) -> str | None:
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        return parent.this.sql().lower()
    if isinstance(parent, exp.Table) and parent.this is node:
        parts = [p.name.lower() for p in (parent.args.get("catalog"), parent.args.get("db")) if p]
        return ".".join(parts) or None
    return None


def _column_list_aliases(tree: exp.Expression) -> Counter[str]:
    """Aliases declared with a column list (``AS g(n)``, ``WITH c(x) AS``): ``name(`` there."""
    names: Counter[str] = Counter()
    for alias in tree.find_all(exp.TableAlias):
        if alias.columns and alias.name:
            names[alias.name.lower()] += 1
    return names


def _postgres_explain_options(tokens: list[Token]) -> tuple[str, list[Token]]:
    index = 1
    if index < len(tokens) and tokens[index].token_type == TokenType.L_PAREN:
        options: list[str] = []
        current: list[str] = []
        index += 1
        while index < len(tokens) and tokens[index].token_type != TokenType.R_PAREN:
            token = tokens[index]
            if token.token_type == TokenType.COMMA:
                options.append(_explain_option(current))
                current = []
            else:
                current.append(token.text.upper())
            index += 1
        if index >= len(tokens):
            raise StatementRefused("EXPLAIN's option list is not closed", hint="")
        options.append(_explain_option(current))
        return f"EXPLAIN ({', '.join(options)})", tokens[index + 1 :]
    words = ["EXPLAIN"]
    for legacy in ("ANALYZE", "VERBOSE"):
        if index < len(tokens) and tokens[index].text.upper() in (legacy, "ANALYSE"):
            words.append(legacy)
            index += 1
    return " ".join(words), tokens[index:]


def _explain_option(words: list[str]) -> str:
    if not words or len(words) > 2 or words[0] not in _POSTGRES_EXPLAIN_OPTIONS:
        raise StatementRefused(f"unknown EXPLAIN option {' '.join(words)[:40]!r}", hint="")
    if len(words) == 2 and words[1] not in _POSTGRES_EXPLAIN_VALUES:
        raise StatementRefused(f"unknown EXPLAIN option value {words[1][:40]!r}", hint="")
    return " ".join(words)


def _mysql_explain_options(tokens: list[Token]) -> tuple[str, list[Token]]:
    words = ["EXPLAIN"]
    index = 1
    if index < len(tokens) and tokens[index].text.upper() == "ANALYZE":
        words.append("ANALYZE")
        index += 1
    if index < len(tokens) and tokens[index].text.upper() in ("EXTENDED", "PARTITIONS"):
        words.append(tokens[index].text.upper())
        index += 1
    if index < len(tokens) and tokens[index].text.upper() == "FORMAT":
        value = tokens[index + 2].text.upper() if index + 2 < len(tokens) else ""
        if index + 1 >= len(tokens) or tokens[index + 1].token_type != TokenType.EQ:
            raise StatementRefused("EXPLAIN FORMAT takes = and a format name", hint="")
        if value not in _MYSQL_EXPLAIN_FORMATS:
            raise StatementRefused(f"unknown EXPLAIN format {value[:40]!r}", hint="")
        words.append(f"FORMAT={value}")
        index += 3
    return " ".join(words), tokens[index:]


_LITERAL_HINT: Mapping[str, str] = {
    "postgres": "Write strings in single quotes ('it''s'); U&'…' strings are not accepted.",
    "mysql": (
        "Write strings in single quotes without backslashes ('it''s'; for LIKE escapes use"
        " ESCAPE '!'), identifiers in backticks."
    ),
    "sqlite": "Write strings in single quotes ('it''s').",
}


def _well_formed(source: str, kind: TokenType, dialect: str) -> bool:
    """Whether ``source`` is one literal of ``kind`` by the database's own lexical rules."""
    if kind == TokenType.IDENTIFIER:
        return _quoted_body(source, {"postgres": '"', "mysql": "`"}.get(dialect, source[:1]))
    if kind == TokenType.STRING:
        if dialect == "mysql" and "\\" in source:
            return False  # its meaning depends on NO_BACKSLASH_ESCAPES
        return _quoted_body(source, "'")
    if kind == TokenType.NATIONAL_STRING:
        return source[:1] in "nN" and _well_formed(source[1:], TokenType.STRING, dialect)
    if kind in (TokenType.BIT_STRING, TokenType.HEX_STRING):
        body = source[2:-1] if source[1:2] == "'" else source[2:]
        return source[:1] in "bBxX0" and all(c in "0123456789abcdefABCDEF" for c in body)
    if kind == TokenType.BYTE_STRING and dialect == "postgres":
        return source[:1] in "eE" and _escape_string_body(source[1:])
    if kind == TokenType.HEREDOC_STRING and dialect == "postgres":
        return _dollar_quoted(source)
    return False  # raw strings, U&'…' and the like: refused


def _quoted_body(source: str, quote: str) -> bool:
    if quote == "[":
        return source.endswith("]") and "]" not in source[1:-1]
    if len(source) < 2 or source[0] != quote or source[-1] != quote:
        return False
    return quote not in source[1:-1].replace(quote * 2, "")


def _escape_string_body(source: str) -> bool:
    if len(source) < 2 or source[0] != "'" or source[-1] != "'":
        return False
    body, index = source[1:-1], 0
    while index < len(body):
        if body[index] == "\\":
            index += 2
            continue
        if body[index] == "'":
            if body[index + 1 : index + 2] != "'":
                return False
            index += 2
            continue
        index += 1
    return index == len(body)


def _dollar_quoted(source: str) -> bool:
    end = source.find("$", 1)
    if not source.startswith("$") or end < 0:
        return False
    tag = source[1:end]
    if tag and not (
        tag.isascii() and (tag[0].isalpha() or tag[0] == "_") and tag.replace("_", "").isalnum()
    ):
        return False
    delimiter = source[: end + 1]
    body = source[len(delimiter) : -len(delimiter)]
    return (
        len(source) >= 2 * len(delimiter) and source.endswith(delimiter) and delimiter not in body
    )


def _would_merge(previous: Token, token: Token) -> bool:
    """Whether two adjacent tokens, one of them quoted, could read as one on the server.

    ``U&"…"``, ``E'…'``, ``_utf8mb4'…'``, ``x'…'``: a prefix glued to a quote makes another
    kind of token, so a quoted token gets a space before it unless punctuation precedes.
    """
    if token.token_type in _QUOTED:
        return previous.text[-1:].isalnum() or previous.text[-1:] in "_$&'\"`]"
    if previous.token_type in _QUOTED:
        return token.text[:1].isalnum() or token.text[:1] in "_$&'\"`["
    return False


def _emit(sql: str, tokens: Sequence[Token]) -> str:
    """The tokens as the database will read them: as written, with comments removed."""
    parts: list[str] = []
    previous: Token | None = None
    for token in tokens:
        if previous is not None:
            gap = sql[previous.end + 1 : token.start]
            if gap and all(c in _WHITESPACE for c in gap):
                parts.append(gap)
            elif gap:  # a comment (or exotic whitespace) was here
                parts.append("\n" if "\n" in gap else " ")
            elif _would_merge(previous, token):
                parts.append(" ")
        parts.append(sql[token.start : token.end + 1])
        previous = token
    return "".join(parts)


__all__ = ["DIALECTS", "ReadStatement", "StatementRefused", "check_read_statement"]
