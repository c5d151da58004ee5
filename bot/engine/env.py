"""The engine's own environment knobs, read when an agent is built.

The engine is usable as a library without the bot's settings, so the two tuning
variables of the ReAct design are read here (and only here). Values that are not
positive integers are ignored with a warning rather than failing a run.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

CYCLE_DETECTION_THRESHOLD_VAR = "REACT_CYCLE_DETECTION_THRESHOLD"
COMPLETION_CHECK_MIN_TOOLS_VAR = "REACT_COMPLETION_CHECK_MIN_TOOLS"


def positive_int_from_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        logger.warning("%s=%r is not a positive integer; using %d", name, raw, default)
        return default
    return value
