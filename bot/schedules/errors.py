"""The one error of the schedules package: what is wrong with a schedule, in a person's words."""

from __future__ import annotations


class ScheduleError(ValueError):
    """A schedule that cannot be used. The message is user-facing: it says exactly what is
    wrong and how to fix it, so a tool may hand it to the model (and a card to a person) as is."""
