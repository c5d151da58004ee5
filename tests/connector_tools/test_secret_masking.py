"""The secret masker that keeps connector credentials out of observations and logs."""

from __future__ import annotations

import base64
import html
import json
import urllib.parse

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.config import ConnectorsConfig, connector_secrets
from connectors.secret_masking import MIN_SECRET_CHARS, SecretMasker, secret_parts

SECRET = 'sk-Live/"é😀 x'

ENCODINGS = {
    "raw": lambda s: s,
    "url": lambda s: urllib.parse.quote(s, safe=""),
    "url_lower_hex": lambda s: "".join(
        part.lower() if part.startswith("%") else part
        for part in _percent_parts(urllib.parse.quote(s, safe=""))
    ),
    "form": urllib.parse.quote_plus,
    "json": lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    "json_ascii": lambda s: json.dumps(s)[1:-1],
    "json_in_json": lambda s: json.dumps(json.dumps(s)[1:-1])[1:-1],
    "html": html.escape,
    "html_numeric": lambda s: "".join(f"&#{ord(c)};" for c in s),
    "html_hex": lambda s: "".join(f"&#x{ord(c):X};" for c in s),
}


def _percent_parts(text: str) -> list[str]:
    """Splits "a%2Fb" into ["a", "%2F", "b"], so only the escapes change case."""
    parts, i = [], 0
    while i < len(text):
        if text[i] == "%":
            parts.append(text[i : i + 3])
            i += 3
        else:
            parts.append(text[i])
            i += 1
    return parts


def test_every_encoding_of_a_secret_is_masked():
    masker = SecretMasker([SECRET])
    for name, encode in ENCODINGS.items():
        assert masker.mask(f"a {encode(SECRET)} b") == "a *** b", name


def test_parts_of_credentials_are_secrets_too():
    basic = "Basic " + base64.b64encode(b"robot:pa55word-99").decode()
    assert secret_parts("Bearer tok-123456") == {"Bearer tok-123456", "tok-123456"}
    assert {"robot:pa55word-99", "pa55word-99"} <= secret_parts(basic)
    assert "p@ss-w0rd" in secret_parts("postgresql://user:p%40ss-w0rd@db/x")
    masker = SecretMasker(["Bearer tok-123456", basic, "postgresql://user:p%40ss-w0rd@db/x"])
    assert masker.mask("tok-123456 pa55word-99 p@ss-w0rd p%40ss-w0rd") == "*** *** *** ***"


def test_short_values_and_ordinary_text_are_left_alone():
    masker = SecretMasker(["1", "true", "abcde"])
    assert not masker
    assert masker.mask("1 true abcde") == "1 true abcde"
    masker = SecretMasker(["secret-value"])
    assert masker.mask("a secret, a value, secret_value") == "a secret, a value, secret_value"


def test_a_cut_that_ends_in_a_secret_masks_its_start():
    masker = SecretMasker([SECRET])
    assert masker.mask("body " + SECRET[:9], cut=True) == "body ***"
    assert masker.mask("body " + ENCODINGS["url"](SECRET)[:14], cut=True) == "body ***"
    assert masker.mask("body " + SECRET[: MIN_SECRET_CHARS - 1], cut=True).endswith("sk-Li")
    # Only at a cut, and only when the text really ends in the secret's beginning.
    assert masker.mask("body " + SECRET[:9]) == "body " + SECRET[:9]
    assert masker.mask("body sk-Live/ and more", cut=True) == "body sk-Live/ and more"


def test_connector_secrets_come_from_the_settings_models():
    config = ConnectorsConfig(
        {
            "mcp": {
                # As the environment gives it: JSON text.
                "servers": json.dumps(
                    [
                        {"name": "gh", "command": ["x"], "env": {"TOKEN": "env-secret-1"}},
                        {"name": "kb", "url": "https://k.test/mcp", "headers": {"A": "hdr-2xyz"}},
                    ]
                )
            },
            "http": {
                "allowed_hosts": ["a.test"],
                "headers": {"X-Api-Key": "http-key-3"},
                "host_headers": {"a.test": {"X-Other": "host-key-4"}},
            },
            "sql": {"enabled": False, "url": "postgresql://u:sql-pass-5@db/x"},
            "utilities": {},
        }
    )
    assert connector_secrets(config) == {
        "env-secret-1",
        "hdr-2xyz",
        "http-key-3",
        "host-key-4",
        "postgresql://u:sql-pass-5@db/x",  # the masker also masks its password alone
    }


def test_a_section_that_does_not_validate_is_searched_by_shape():
    config = ConnectorsConfig(
        {
            "http": {"allowed_hosts": ["a.test"], "headers": {"X-Key": "k-1234567"}, "typo": 1},
            "nonexistent-plugin": {"api_token": "plugin-token-1", "name": "public"},
        }
    )
    assert connector_secrets(config) == {"k-1234567", "plugin-token-1"}


_CHARS = st.characters(codec="utf-8", exclude_characters="*")


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(_CHARS, min_size=MIN_SECRET_CHARS, max_size=24),
    other=st.text(_CHARS, min_size=MIN_SECRET_CHARS, max_size=12),
    pieces=st.lists(st.text(max_size=20), min_size=1, max_size=4),
    encodings=st.lists(st.sampled_from(sorted(ENCODINGS)), min_size=1, max_size=4),
    cut=st.integers(min_value=0, max_value=400),
)
def test_a_secret_anywhere_in_any_encoding_never_shows(secret, other, pieces, encodings, cut):
    # The secret, in random encodings, between random pieces of text.
    text = "".join(
        piece + ENCODINGS[encodings[i % len(encodings)]](secret) for i, piece in enumerate(pieces)
    )
    masker = SecretMasker([secret, other])
    masked = masker.mask(text)
    for encoding in encodings:
        assert ENCODINGS[encoding](secret) not in masked
    assert secret not in masked
    # Cut anywhere, the end shows no beginning of the secret of MIN_SECRET_CHARS or more.
    tail = masker.mask(text[:cut], cut=True)
    assert not any(tail.endswith(secret[:n]) for n in range(MIN_SECRET_CHARS, len(secret) + 1))
