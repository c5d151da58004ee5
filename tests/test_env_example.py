""".env.example lists every setting larkgate reads, each with a comment, and nothing else,
every one commented out.

A setting added to ``bot.config.Settings`` without a line here fails this test, so the
example (which newcomers copy to ``.env``) can never drift from the code again. Copied
as it is, it sets nothing: a filled-in example value (a model URL, a DATABASE_URL) would
otherwise win over ``larkgate dev``'s own defaults without anyone having chosen it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.config import Settings
from bot.network import NETWORK_VARIABLES
from connectors.config import ENV_OVERRIDE

from support.env import clear_settings

EXAMPLE = Path(__file__).resolve().parents[1] / ".env.example"
# "# NAME=value": a setting shown commented out (its default, or an example value).
ASSIGNMENT = re.compile(r"^(?P<commented>#\s*)?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")
# Values in the example that are placeholders or suggestions, not the defaults (which are
# empty: the optional file and connectors are off until set).
PLACEHOLDERS = {
    "FEISHU_APP_ID",
    "LLM_BASE_URL",
    "LLM_MODEL",
    "LARKGATE_CONFIG",
    "SQL_CONNECTOR_URL",
    "HTTP_CONNECTOR_ALLOWED_HOSTS",
    "LARKGATE_CA_BUNDLE",
}


def setting_names() -> set[str]:
    """The environment names of Settings' fields (upper-cased names, or their aliases)."""
    prefix = Settings.model_config.get("env_prefix", "")
    names = set()
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias or info.alias
        names.add(alias.upper() if isinstance(alias, str) else f"{prefix}{name}".upper())
    return names


def example_lines() -> list[str]:
    return EXAMPLE.read_text(encoding="utf-8").splitlines()


def assignments() -> dict[str, list[int]]:
    """Each name assigned in the file (commented out or not) → its line numbers."""
    found: dict[str, list[int]] = {}
    for number, line in enumerate(example_lines()):
        match = ASSIGNMENT.match(line.strip())
        if match:
            found.setdefault(match["name"], []).append(number)
    return found


def test_every_setting_is_listed():
    missing = sorted(setting_names() - set(assignments()))
    assert not missing, f".env.example lacks {', '.join(missing)}: add each with a comment"


def test_the_example_names_only_real_settings():
    unknown = sorted(
        name
        for name in assignments()
        if name not in setting_names()
        and not ENV_OVERRIDE.match(name)  # <NAME>_CONNECTOR_<SETTING>
        and name not in NETWORK_VARIABLES  # proxies and CA files: read by the HTTP libraries
    )
    assert not unknown, f".env.example names settings larkgate does not read: {unknown}"


def test_no_line_sets_a_value():
    """Copied to .env, the example changes nothing: every line is blank or a comment."""
    setting = [
        f"line {number + 1}: {line}"
        for number, line in enumerate(example_lines())
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert not setting, "uncommented lines in .env.example (write '# NAME=value'): " + (
        "; ".join(setting)
    )


def test_each_setting_is_shown_once():
    twice = sorted(name for name, numbers in assignments().items() if len(numbers) > 1)
    assert not twice, f"settings shown on several lines of .env.example: {twice}"


def test_every_setting_has_a_comment():
    """Above each setting, before the next blank line, is a comment that explains it."""
    lines = example_lines()
    for name in setting_names():
        number = assignments()[name][0]
        above = number - 1
        while above >= 0 and ASSIGNMENT.match(lines[above].strip()):
            above -= 1  # a group of related settings shares one comment
        assert above >= 0 and lines[above].lstrip().startswith("#"), (
            f"{name} in .env.example has no comment above it"
        )


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path, setting_names())


@pytest.mark.usefixtures("clean_env")
def test_the_example_loads_and_shows_the_defaults(tmp_path):
    """Copied, the example sets nothing; every value in it uncommented loads, and shows the
    default (but the placeholders)."""
    as_copied = Settings(_env_file=EXAMPLE)  # type: ignore[call-arg]
    assert as_copied.model_fields_set == set()
    uncommented = tmp_path / "uncommented.env"
    uncommented.write_text(
        "".join(
            f"{match['name']}={match['value']}\n"
            for match in map(ASSIGNMENT.match, map(str.strip, example_lines()))
            if match
        ),
        encoding="utf-8",
    )
    from_example = Settings(_env_file=uncommented)  # type: ignore[call-arg]
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    differing = {
        name.upper()
        for name in Settings.model_fields
        if getattr(from_example, name) != getattr(defaults, name)
    }
    assert differing <= PLACEHOLDERS, (
        f"values in .env.example differ from the defaults: {sorted(differing - PLACEHOLDERS)}"
    )
