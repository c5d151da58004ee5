"""Reading Feishu's answers: the JSON envelope ``{code, msg, data}`` or, for a download,
the file itself; a failure becomes the exception mapped in :mod:`bot.feishu.errors`."""

from __future__ import annotations

import json
from typing import Any

import lark_oapi as lark

from .errors import FeishuTransportError, error_for


def envelope(
    endpoint: str, raw: lark.RawResponse | None, *, binary: bool = False
) -> dict[str, Any]:
    """The parsed body; raises the mapped FeishuError when it reports a failure.

    ``binary``: any 2xx answer is the file itself (as lark-oapi reads downloads) and
    yields ``{}``; anything else must be Feishu's JSON error.
    """
    if raw is None:
        raise FeishuTransportError(None, "no response", endpoint=endpoint)
    status = raw.status_code
    if binary and 200 <= status < 300:
        return {}
    try:
        body = json.loads(raw.content or b"")
    except (ValueError, RecursionError):  # nested past the parser's depth: not an envelope
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("code"), int):
        reason = f"no Feishu JSON in the answer (HTTP {status})"
        raise FeishuTransportError(None, reason, endpoint=endpoint, http_status=status)
    code, msg = body["code"], str(body.get("msg") or "")
    if code == 0 and status != 429 and not binary:
        return body
    headers = {str(k).lower(): str(v) for k, v in (raw.headers or {}).items()}
    raw_error = body.get("error")
    error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
    log_id = error.get("log_id") or headers.get("x-tt-logid")
    raise error_for(
        code,
        msg,
        endpoint=endpoint,
        log_id=log_id,
        http_status=status,
        headers=headers,
        error=error,
    )
