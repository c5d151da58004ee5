"""Reading a database role's privileges (connectors/sql_roles.py), without a server.

No MySQL or MariaDB server is available to the tests: the grant parsing is checked on
``SHOW GRANTS`` lines as MySQL 5.7/8 and MariaDB print them, and the inspection on a fake
connection that answers with them. PostgreSQL's inspection runs on the real server in
test_sql_security.py; here only the reading of its rows.
"""

from __future__ import annotations

from typing import Any

import pytest

from connectors.sql_roles import (
    PrivilegedRoleError,
    PrivilegeGrant,
    RoleGrant,
    RoleReport,
    inspect_role,
    like_matches,
    mysql_grant_findings,
    parse_grant,
    postgres_findings,
    safe_setup,
)

MYSQL8_ROOT = [
    "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, RELOAD, SHUTDOWN, PROCESS, FILE,"
    " REFERENCES, INDEX, ALTER, SHOW DATABASES, SUPER, CREATE TEMPORARY TABLES, LOCK TABLES,"
    " EXECUTE, REPLICATION SLAVE, REPLICATION CLIENT, CREATE VIEW, SHOW VIEW, CREATE ROUTINE,"
    " ALTER ROUTINE, CREATE USER, EVENT, TRIGGER, CREATE TABLESPACE, CREATE ROLE, DROP ROLE"
    " ON *.* TO `root`@`localhost` WITH GRANT OPTION",
    "GRANT APPLICATION_PASSWORD_ADMIN,AUDIT_ABORT_EXEMPT,BACKUP_ADMIN,CONNECTION_ADMIN,"
    "SET_USER_ID,SYSTEM_USER,SYSTEM_VARIABLES_ADMIN,XA_RECOVER_ADMIN ON *.* TO"
    " `root`@`localhost` WITH GRANT OPTION",
    "GRANT PROXY ON ``@`` TO `root`@`localhost` WITH GRANT OPTION",
]
MYSQL_READER = [
    "GRANT USAGE ON *.* TO `reader`@`%`",
    "GRANT SELECT, SHOW VIEW ON `shop`.* TO `reader`@`%`",
    "GRANT SELECT (id, name), INSERT (name) ON `shop`.`customers` TO `reader`@`%`",
    "GRANT INSERT, UPDATE, DELETE ON `shop`.`orders` TO `reader`@`%`",
    "REVOKE INSERT ON `mysql`.* FROM `reader`@`%`",
]
MARIADB_ROOT = [
    "GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` IDENTIFIED VIA mysql_native_password"
    " USING 'invalid' OR unix_socket WITH GRANT OPTION",
    "GRANT PROXY ON ''@'%' TO 'root'@'localhost' WITH GRANT OPTION",
]
MARIADB_BOT = [
    "GRANT USAGE ON *.* TO `bot`@`%` IDENTIFIED BY PASSWORD"
    " '*A4B6157319038724E3560894F7F932C8886EBFCF'",
    "GRANT SELECT ON `shop`.* TO `bot`@`%`",
    "GRANT `reader` TO `bot`@`%`",
    "SET DEFAULT ROLE `reader` FOR `bot`@`%`",
]


def _attributes(lines: list[str]) -> set[str]:
    return {finding.attribute for finding in mysql_grant_findings(lines)}


def test_grant_lines_are_read_into_privileges_and_levels() -> None:
    assert parse_grant(MYSQL_READER[1]) == PrivilegeGrant(
        ("SELECT", "SHOW VIEW"), "shop", None, False
    )
    assert parse_grant(MYSQL_READER[2]) == PrivilegeGrant(
        ("SELECT", "INSERT"), "shop", "customers", False
    )
    assert parse_grant(MYSQL8_ROOT[0]).schema is None  # type: ignore[union-attr]
    assert parse_grant(MARIADB_ROOT[0]) == PrivilegeGrant(("ALL PRIVILEGES",), None, None, True)
    assert parse_grant("GRANT SELECT ON `we``ird`.* TO `u`@`%`") == PrivilegeGrant(
        ("SELECT",), "we`ird", None, False
    )
    assert parse_grant("GRANT EXECUTE ON PROCEDURE `shop`.`p` TO `u`@`%`") == PrivilegeGrant(
        ("EXECUTE",), "shop", "p", False
    )


def test_role_grants_name_the_roles_to_look_into() -> None:
    assert parse_grant("GRANT `reader` TO `bot`@`%`") == RoleGrant(("`reader`",))
    assert parse_grant("GRANT `analyst`@`%`,`r2`@`%` TO `bot`@`%`") == RoleGrant(
        ("`analyst`@`%`", "`r2`@`%`")
    )


def test_lines_that_grant_nothing_are_skipped() -> None:
    assert parse_grant("SET DEFAULT ROLE `reader` FOR `bot`@`%`") is None
    assert parse_grant("REVOKE INSERT ON `mysql`.* FROM `u`@`%`") is None


def test_a_reader_is_accepted() -> None:
    assert mysql_grant_findings(MYSQL_READER) == ()
    assert mysql_grant_findings(MARIADB_BOT) == ()


def test_root_is_refused_for_each_dangerous_privilege() -> None:
    found = _attributes(MYSQL8_ROOT)
    for attribute in (
        "FILE on *.*",
        "SUPER on *.*",
        "PROCESS on *.*",
        "SHUTDOWN on *.*",
        "RELOAD on *.*",
        "CREATE USER on *.*",
        "REPLICATION SLAVE on *.*",
        "SELECT on *.*",
        "CONNECTION_ADMIN on *.*",
        "SYSTEM_VARIABLES_ADMIN on *.*",
        "SET_USER_ID on *.*",
        "GRANT OPTION on *.*",
        "PROXY",
    ):
        assert attribute in found
    assert {"ALL PRIVILEGES on *.*", "PROXY", "GRANT OPTION on *.*"} <= _attributes(MARIADB_ROOT)


@pytest.mark.parametrize(
    ("line", "attribute"),
    [
        ("GRANT FILE ON *.* TO `u`@`%`", "FILE on *.*"),
        ("GRANT ALL ON *.* TO `u`@`%`", "ALL on *.*"),
        ("GRANT PROCESS, SELECT ON *.* TO 'u'@'localhost'", "PROCESS on *.*"),
        ("GRANT CONNECTION ADMIN ON *.* TO `u`@`%`", "CONNECTION ADMIN on *.*"),  # MariaDB
        ("GRANT BINLOG MONITOR ON *.* TO `u`@`%`", "BINLOG MONITOR on *.*"),
        ("GRANT SELECT ON `mysql`.* TO `u`@`%`", "SELECT on `mysql`.*"),
        ("GRANT SELECT ON `mysql`.`user` TO `u`@`%`", "SELECT on `mysql`.`user`"),
        ("GRANT SELECT ON `my%`.* TO `u`@`%`", "SELECT on `my%`.*"),  # the pattern matches
        ("GRANT UPDATE ON `m_sql`.* TO `u`@`%`", "UPDATE on `m_sql`.*"),
    ],
)
def test_one_dangerous_grant_is_enough(line: str, attribute: str) -> None:
    assert attribute in _attributes([MYSQL_READER[0], line])


def test_schema_patterns_match_like_mysql_does() -> None:
    assert like_matches("my%", "mysql") and like_matches("%", "mysql")
    assert like_matches("m_sql", "mysql") and like_matches("MYSQL", "mysql")
    assert not like_matches("shop\\_%", "mysql") and not like_matches("shop", "mysql")
    assert not like_matches("my\\_sql", "mysql")


def test_a_grant_that_cannot_be_read_counts_as_dangerous() -> None:
    [finding] = mysql_grant_findings(["GRANT SELECT ON `unterminated TO `u`@`%`"])
    assert "cannot read" in finding.attribute


class FakeMySQL:
    """Answers the inspection's statements the way a server with roles would."""

    def __init__(self, grants: dict[str, list[str]]) -> None:
        self.grants = grants
        self.asked: list[str] = []

    async def __call__(self, sql: str) -> list[tuple[Any, ...]]:
        self.asked.append(sql)
        if sql == "SELECT CURRENT_USER()":
            return [("bot@%",)]
        key = sql.removeprefix("SHOW GRANTS FOR ").strip() if "FOR" in sql else ""
        return [(line,) for line in self.grants[key]]


async def test_privileges_of_granted_roles_are_looked_into() -> None:
    fake = FakeMySQL(
        {
            "": ["GRANT USAGE ON *.* TO `bot`@`%`", "GRANT `analyst`@`%` TO `bot`@`%`"],
            "`analyst`@`%`": [
                "GRANT SELECT ON `shop`.* TO `analyst`@`%`",
                "GRANT `loader`@`%` TO `analyst`@`%`",
            ],
            "`loader`@`%`": ["GRANT FILE ON *.* TO `loader`@`%`"],
        }
    )
    report = await inspect_role("mysql", "shop", fake)
    assert report.role == "bot@%"
    assert report.summary() == "FILE on *.*"
    assert fake.asked[-1] == "SHOW GRANTS FOR `loader`@`%`"


async def test_a_role_granted_in_a_cycle_is_read_once() -> None:
    fake = FakeMySQL(
        {
            "": ["GRANT `a` TO `bot`@`%`"],
            "`a`": ["GRANT `b` TO `a`"],
            "`b`": ["GRANT `a` TO `b`", "GRANT SELECT ON `shop`.* TO `b`"],
        }
    )
    report = await inspect_role("mariadb", "shop", fake)
    assert not report.privileged
    assert fake.asked.count("SHOW GRANTS FOR `a`") == 1


# ---------------------------------------------------------------- PostgreSQL rows

# (login, role, is the login, rolsuper, rolcreaterole, rolreplication, rolbypassrls)
READER_ROWS = [("bot", "bot", True, False, False, False, False)]


def test_postgres_reader_has_no_findings() -> None:
    assert postgres_findings(READER_ROWS) == ()
    assert (
        postgres_findings([*READER_ROWS, ("bot", "analysts", False, False, False, False, False)])
        == ()
    )


def test_postgres_findings_name_roles_and_attributes() -> None:
    rows = [
        ("bot", "bot", True, False, True, False, True),
        ("bot", "pg_signal_backend", False, False, False, False, False),
        ("bot", "admins", False, True, False, False, False),
    ]
    assert [f.attribute for f in postgres_findings(rows)] == [
        "CREATEROLE",
        "BYPASSRLS",
        "member of pg_signal_backend",
        "member of admins (superuser)",
    ]


def test_a_superuser_is_reported_once_as_superuser() -> None:
    rows = [
        ("postgres", "postgres", True, True, True, True, True),
        ("postgres", "pg_execute_server_program", False, False, False, False, False),
    ]
    assert [f.attribute for f in postgres_findings(rows)] == ["superuser"]


def test_the_refusal_names_the_role_and_a_safe_setup() -> None:
    report = RoleReport(
        "postgresql",
        "bot",
        "shop",
        postgres_findings(
            [("bot", "pg_write_server_files", False, False, False, False, False), *READER_ROWS]
        ),
    )
    message = str(PrivilegedRoleError(report))
    assert message.startswith("PostgreSQL role bot is privileged (member of pg_write_server_files)")
    for statement in (
        "CREATE ROLE larkgate_reader LOGIN PASSWORD",
        "GRANT CONNECT ON DATABASE shop TO larkgate_reader;",
        "GRANT USAGE ON SCHEMA public TO larkgate_reader;",
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO larkgate_reader;",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO larkgate_reader;",
    ):
        assert statement in message
    assert "GRANT SELECT, SHOW VIEW ON `shop`.* TO 'larkgate_reader'@'%';" in safe_setup(
        "mysql", "shop"
    )
    assert 'GRANT CONNECT ON DATABASE "My Shop"' in safe_setup("postgresql", "My Shop")
