"""The states of an approval, shared by the store (which writes them) and the card (which
shows them), so neither can gain a state the other does not know."""

from __future__ import annotations

from typing import Final, Literal, get_args

ApprovalState = Literal["pending", "approved", "denied", "expired", "cancelled"]

PENDING: Final = "pending"
APPROVED: Final = "approved"
DENIED: Final = "denied"
EXPIRED: Final = "expired"
CANCELLED: Final = "cancelled"
APPROVAL_STATES: tuple[ApprovalState, ...] = get_args(ApprovalState)


def approval_state(value: str) -> ApprovalState:
    """A state read back from the database; anything else there is corruption, said loudly."""
    for state in APPROVAL_STATES:
        if value == state:
            return state
    raise ValueError(f"unknown approval state {value!r}")
