"""Is the SQL connector's database role safe for a read tool? And if not, what to set up.

``sql_query`` runs without a person's approval, so what its role *could* do matters as
much as what the statement policy lets through: the policy is a parser's judgement, the
role is the database's. The connector inspects its role when it starts (and on first use,
and in ``larkgate check``) and refuses one that has any of these:

PostgreSQL, on the login role or any role it is a member of (directly or through other
roles; a member can ``SET ROLE`` to it, which also hands over attributes):

- superuser (``rolsuper``): everything, ``COPY … TO PROGRAM`` included;
- ``pg_execute_server_program``, ``pg_write_server_files``, ``pg_read_server_files``:
  programs and files on the database host;
- ``pg_signal_backend`` (and ``pg_signal_autovacuum_worker`` where it exists): cancel or
  terminate other sessions;
- ``pg_monitor`` and its parts ``pg_read_all_settings`` (settings only superusers see,
  such as ``primary_conninfo`` with its password), ``pg_read_all_stats`` (every session's
  query text: other people's data and passwords typed into ``ALTER ROLE``) and
  ``pg_stat_scan_tables`` (monitoring functions that lock tables for long scans): what a
  chat bot shows to whoever asks it, it should not be able to read;
- ``pg_checkpoint``, ``pg_maintain``, ``pg_create_subscription``: server-wide I/O, locks on
  every table, and connections from the server to anywhere;
- ``CREATEROLE`` (before PostgreSQL 16 it lets a role grant itself any of the above),
  ``REPLICATION`` (streams every row, and its slots retain WAL until the disk fills),
  ``BYPASSRLS`` (reads the rows row-level security hides).

Accepted on purpose: ``CREATEDB`` (a new database holds none of the existing data, and
``CREATE DATABASE`` cannot run in sql_query's transaction), owning tables, and table
privileges beyond SELECT (``sql_execute``, a write tool, needs them; sql_query's
transaction is read-only), ``pg_read_all_data`` / ``pg_write_all_data`` (data the admin
chose to expose, not the server).

MySQL and MariaDB, from ``SHOW GRANTS`` (and the grants of the roles it lists): any
server-wide (``*.*``) privilege other than USAGE, since each covers the grant tables in
``mysql`` (FILE, SUPER, PROCESS, SHUTDOWN, RELOAD and the ``*_ADMIN`` privileges are only
ever server-wide), any privilege on the ``mysql`` schema, and PROXY.

There is no setting to accept a privileged role anyway: the fix is a dedicated role, a
few statements long (``safe_setup``), and a switch to skip the check would be set once and
forgotten while the policy became the only thing between the model and the server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from bot.engine import ToolError

# Runs one statement and returns its rows.
Fetch = Callable[[str], Awaitable[list[tuple[Any, ...]]]]

ROLE_BACKENDS = frozenset({"postgresql", "mysql", "mariadb"})
READER_ROLE = "larkgate_reader"

POSTGRES_ROLES: Mapping[str, str] = {
    "pg_execute_server_program": "runs programs on the database host (COPY … TO PROGRAM)",
    "pg_write_server_files": "writes files on the database host (COPY … TO 'file')",
    "pg_read_server_files": "reads any file the server can read (COPY … FROM 'file')",
    "pg_signal_backend": "cancels and terminates other sessions",
    "pg_signal_autovacuum_worker": "signals autovacuum workers",
    "pg_monitor": "reads every session's queries and every server setting",
    "pg_read_all_settings": "reads settings only superusers see (primary_conninfo, …)",
    "pg_read_all_stats": "reads every session's query text (pg_stat_activity)",
    "pg_stat_scan_tables": "runs monitoring functions that lock tables for long scans",
    "pg_checkpoint": "forces checkpoints (server-wide I/O)",
    "pg_maintain": "runs VACUUM, REINDEX, CLUSTER and LOCK on every table",
    "pg_create_subscription": "makes the server connect to other servers",
}
POSTGRES_ATTRIBUTES: Mapping[str, tuple[str, str]] = {
    "rolsuper": ("superuser", "can do anything, COPY … TO PROGRAM included"),
    "rolcreaterole": ("CREATEROLE", "creates roles and can grant itself the ones above"),
    "rolreplication": ("REPLICATION", "streams every row and keeps WAL until the disk fills"),
    "rolbypassrls": ("BYPASSRLS", "reads the rows row-level security hides"),
}

MYSQL_PRIVILEGES: Mapping[str, str] = {
    "ALL": "every privilege, FILE, SUPER and SHUTDOWN included",
    "ALL PRIVILEGES": "every privilege, FILE, SUPER and SHUTDOWN included",
    "FILE": "reads and writes files on the database host (LOAD_FILE, INTO OUTFILE)",
    "SUPER": "kills other sessions, changes global settings, writes despite read_only",
    "PROCESS": "sees the statements of every session (SHOW PROCESSLIST)",
    "SHUTDOWN": "stops the server",
    "RELOAD": "flushes logs, privileges and tables (FLUSH TABLES WITH READ LOCK)",
    "CREATE USER": "creates, renames and drops accounts",
    "REPLICATION SLAVE": "reads the binary log: every change to every table",
    "REPLICATION REPLICA": "reads the binary log: every change to every table",
    "SELECT": "reads every schema, the password hashes in mysql.user included",
    "GRANT OPTION": "grants its privileges to other accounts",
    "PROXY": "acts as another account",
    "SYSTEM_USER": "acts on system accounts and their sessions",
    "SET_USER_ID": "runs code as another account (DEFINER)",
    "SET_ANY_DEFINER": "runs code as another account (DEFINER)",
    "SET USER": "runs code as another account (DEFINER)",
}
_MYSQL_SERVER_WIDE = "covers every schema, the grant tables in mysql included"


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    attribute: str  # e.g. "superuser", "member of pg_signal_backend", "FILE on *.*"
    risk: str  # what a statement could do with it


@dataclasses.dataclass(frozen=True, slots=True)
class RoleReport:
    backend: str
    role: str
    database: str
    findings: tuple[Finding, ...] = ()

    @property
    def privileged(self) -> bool:
        return bool(self.findings)

    def summary(self) -> str:
        return ", ".join(finding.attribute for finding in self.findings)


class PrivilegedRoleError(ToolError):
    """The connector's database role can do more than read: the connector refuses it."""

    def __init__(self, report: RoleReport) -> None:
        self.report = report
        kind = "PostgreSQL role" if report.backend == "postgresql" else "MySQL account"
        risks = "; ".join(f"{f.attribute}: {f.risk}" for f in report.findings[:8])
        super().__init__(
            f"{kind} {report.role} is privileged ({report.summary()}), so the SQL connector"
            " refuses it: sql_query runs without approval, and with this role a statement"
            f" could reach past the data ({risks}). Connect as a dedicated role that can only"
            " read (SQL_CONNECTOR_URL), created by the owner of the tables:\n"
            + safe_setup(report.backend, report.database)
        )


def safe_setup(backend: str, database: str, schema: str = "public") -> str:
    """The statements that create a role fit for the connector (a placeholder password)."""
    if backend == "postgresql":
        name = _pg_identifier(database or "your_database")
        lines = [
            f"CREATE ROLE {READER_ROLE} LOGIN PASSWORD 'choose-a-strong-password';",
            f"GRANT CONNECT ON DATABASE {name} TO {READER_ROLE};",
            f"GRANT USAGE ON SCHEMA {schema} TO {READER_ROLE};",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {READER_ROLE};",
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {READER_ROLE};",
        ]
    else:
        name = "`" + (database or "your_database").replace("`", "``") + "`"
        lines = [
            f"CREATE USER '{READER_ROLE}'@'%' IDENTIFIED BY 'choose-a-strong-password';",
            f"GRANT SELECT, SHOW VIEW ON {name}.* TO '{READER_ROLE}'@'%';",
        ]
    lines.append(
        "-- for sql_execute, also grant INSERT, UPDATE, DELETE on the tables it may change"
    )
    return "\n".join("  " + line for line in lines)


async def inspect_role(backend: str, database: str, fetch: Fetch) -> RoleReport:
    """The connection's role and what is dangerous about it (``backend`` as SQLAlchemy's)."""
    if backend == "postgresql":
        return await inspect_postgres_role(database, fetch)
    if backend in ("mysql", "mariadb"):
        return await inspect_mysql_account(backend, database, fetch)
    raise ValueError(f"no role inspection for {backend}")


# ---------------------------------------------------------------- PostgreSQL

_POSTGRES_ROLES_QUERY = (
    "SELECT session_user::text, r.rolname::text, r.rolname = session_user,"
    " r.rolsuper, r.rolcreaterole, r.rolreplication, r.rolbypassrls"
    " FROM pg_catalog.pg_roles AS r"
    " WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')"
    " ORDER BY r.rolname = session_user DESC, r.rolname"
)


async def inspect_postgres_role(database: str, fetch: Fetch) -> RoleReport:
    """The login role (``session_user``: ``RESET ROLE`` returns to it) and its memberships."""
    rows = await fetch(_POSTGRES_ROLES_QUERY)
    login = str(rows[0][0]) if rows else "?"
    return RoleReport("postgresql", _pg_identifier(login), database, postgres_findings(rows))


def postgres_findings(rows: Iterable[Sequence[Any]]) -> tuple[Finding, ...]:
    """Findings from rows of (login, role, is_login, super, createrole, replication, bypassrls)."""
    rows = list(rows)
    findings: list[Finding] = []
    for _login, role, itself, *flags in rows:
        attributes = dict(zip(POSTGRES_ATTRIBUTES, flags, strict=True))
        if itself and attributes["rolsuper"]:
            label, risk = POSTGRES_ATTRIBUTES["rolsuper"]
            return (Finding(label, risk),)  # every other membership follows from it
        if itself:
            findings += [
                Finding(label, risk)
                for column, (label, risk) in POSTGRES_ATTRIBUTES.items()
                if attributes[column]
            ]
            continue
        if role in POSTGRES_ROLES:
            findings.append(Finding(f"member of {role}", POSTGRES_ROLES[role]))
        for column, (label, risk) in POSTGRES_ATTRIBUTES.items():
            if attributes[column]:
                findings.append(Finding(f"member of {role} ({label})", f"SET ROLE {role}: {risk}"))
    return tuple(findings)


def _pg_identifier(name: str) -> str:
    plain = name.isascii() and name.replace("_", "a").isalnum() and name == name.lower()
    if plain and not name[0].isdigit():
        return name
    return '"' + name.replace('"', '""') + '"'


# ---------------------------------------------------------------- MySQL / MariaDB


@dataclasses.dataclass(frozen=True, slots=True)
class PrivilegeGrant:
    privileges: tuple[str, ...]  # upper case, column lists dropped: "SELECT", "CREATE USER"
    schema: str | None  # None: server-wide (*.*); else the schema (a LIKE pattern)
    table: str | None  # None: the whole schema
    grant_option: bool


@dataclasses.dataclass(frozen=True, slots=True)
class RoleGrant:
    roles: tuple[str, ...]  # quoted for SHOW GRANTS FOR, e.g. `reader`@`%`


async def inspect_mysql_account(backend: str, database: str, fetch: Fetch) -> RoleReport:
    """``SHOW GRANTS`` of the current account and, transitively, of the roles granted to it."""
    account_rows = await fetch("SELECT CURRENT_USER()")
    account = str(account_rows[0][0]) if account_rows else "?"
    lines = [str(row[0]) for row in await fetch("SHOW GRANTS")]
    seen: set[str] = set()
    queue = _granted_roles(lines)
    while queue and len(seen) < 20:
        role = queue.pop(0)
        if role in seen:
            continue
        seen.add(role)
        role_lines = [str(row[0]) for row in await fetch(f"SHOW GRANTS FOR {role}")]
        lines += role_lines
        queue += _granted_roles(role_lines)
    return RoleReport(backend, account, database, mysql_grant_findings(lines))


def mysql_grant_findings(lines: Iterable[str]) -> tuple[Finding, ...]:
    """What is dangerous in the lines of ``SHOW GRANTS`` (lines it cannot read are skipped)."""
    findings: dict[str, Finding] = {}
    for line in lines:
        try:
            grant = parse_grant(line)
        except ValueError:
            unreadable = Finding(f"a grant it cannot read ({line[:80]})", "unknown: refused")
            findings.setdefault(unreadable.attribute, unreadable)
            continue
        if not isinstance(grant, PrivilegeGrant):
            continue
        for privilege in grant.privileges:
            finding = _mysql_finding(privilege, grant)
            if finding is not None:
                findings.setdefault(finding.attribute, finding)
        if grant.grant_option and grant.schema is None:
            option = Finding("GRANT OPTION on *.*", MYSQL_PRIVILEGES["GRANT OPTION"])
            findings.setdefault(option.attribute, option)
    return tuple(findings.values())


def _mysql_finding(privilege: str, grant: PrivilegeGrant) -> Finding | None:
    if privilege == "PROXY":
        return Finding("PROXY", MYSQL_PRIVILEGES["PROXY"])
    if grant.schema is None:
        if privilege == "USAGE":
            return None
        risk = MYSQL_PRIVILEGES.get(privilege)
        if risk is None:
            admin = privilege.endswith(("_ADMIN", " ADMIN"))
            risk = "administers the server" if admin else _MYSQL_SERVER_WIDE
        return Finding(f"{privilege} on *.*", risk)
    if privilege != "USAGE" and like_matches(grant.schema, "mysql"):
        where = f"`{grant.schema}`.{'*' if grant.table is None else '`' + grant.table + '`'}"
        return Finding(
            f"{privilege} on {where}", "reads or changes the grant tables (password hashes)"
        )
    return None


def parse_grant(line: str) -> PrivilegeGrant | RoleGrant | None:
    """One line of ``SHOW GRANTS``, or None for what is not a GRANT (REVOKE, SET DEFAULT …).

    A GRANT line it cannot read raises ``ValueError``: the caller counts it as dangerous.
    """
    if not line.lstrip().upper().startswith("GRANT "):
        return None
    try:
        tokens = Dialect.get_or_raise("mysql").tokenize(line)
    except Exception as exc:
        raise ValueError(f"cannot read the grant {line!r}") from exc
    to = _top_level_word(tokens, "TO")
    if to is None:
        raise ValueError(f"no TO in the grant {line!r}")
    on = _top_level_word(tokens[:to], "ON")
    if on is None:
        roles = tuple(_account(part) for part in _split_commas(tokens[1:to]) if part)
        return RoleGrant(roles)
    privileges = tuple(
        " ".join(t.text.upper() for t in part) for part in _split_commas(tokens[1:on]) if part
    )
    schema, table = _grant_level(tokens[on + 1 : to])
    tail = " ".join(t.text.upper() for t in tokens[to + 1 :])
    return PrivilegeGrant(privileges, schema, table, "WITH GRANT OPTION" in tail)


def like_matches(pattern: str, text: str) -> bool:
    """Whether a grant's schema pattern (``%``, ``_``, ``\\`` escapes) matches ``text``."""
    if not pattern:
        return not text
    head = pattern[0]
    if head == "%":
        return any(like_matches(pattern[1:], text[i:]) for i in range(len(text) + 1))
    if head == "\\" and len(pattern) > 1:
        return bool(text) and text[0] == pattern[1] and like_matches(pattern[2:], text[1:])
    if not text:
        return False
    return (head == "_" or head.lower() == text[0].lower()) and like_matches(pattern[1:], text[1:])


def _granted_roles(lines: Iterable[str]) -> list[str]:
    roles: list[str] = []
    for line in lines:
        try:
            grant = parse_grant(line)
        except ValueError:
            continue  # counted as a finding by mysql_grant_findings
        if isinstance(grant, RoleGrant):
            roles += grant.roles
    return roles


def _top_level_word(tokens: Sequence[Token], word: str) -> int | None:
    depth = 0
    for index, token in enumerate(tokens):
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and token.token_type not in _QUOTED and token.text.upper() == word:
            return index
    return None


def _split_commas(tokens: Sequence[Token]) -> list[list[Token]]:
    """Comma-separated parts, with parenthesized column lists left out."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.COMMA:
            parts.append([])
        elif depth == 0:
            parts[-1].append(token)
    return parts


def _grant_level(tokens: Sequence[Token]) -> tuple[str | None, str | None]:
    """(schema, table) of ``ON …``: (None, None) for ``*.*``."""
    kinds = ("TABLE", "FUNCTION", "PROCEDURE")
    names = [t for t in tokens if t.token_type in _QUOTED or t.text.upper() not in kinds]
    texts = [t.text if t.token_type != TokenType.STAR else "*" for t in names]
    if texts in (["*", ".", "*"], ["*"]):
        return None, None
    if len(texts) == 3 and texts[1] == ".":
        return texts[0], None if texts[2] == "*" else texts[2]
    if len(texts) == 1:
        return texts[0], None
    return "%", None  # a shape this parser does not know: assume the worst (it matches mysql)


def _account(tokens: Sequence[Token]) -> str:
    """A role or account as SHOW GRANTS FOR takes it: `name`@`host`."""
    parts = [t.text for t in tokens if t.token_type != TokenType.PARAMETER and t.text != "@"]
    return "@".join("`" + part.replace("`", "``") + "`" for part in parts)


_QUOTED = frozenset({TokenType.STRING, TokenType.IDENTIFIER})


__all__ = [
    "ROLE_BACKENDS",
    "Finding",
    "PrivilegeGrant",
    "PrivilegedRoleError",
    "RoleGrant",
    "RoleReport",
    "inspect_role",
    "like_matches",
    "mysql_grant_findings",
    "parse_grant",
    "postgres_findings",
    "safe_setup",
]
