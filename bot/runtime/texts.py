"""Everything the bot says on its own (not the agent's answers), in one place."""

from __future__ import annotations

HELP_INTRO = """\
**larkgate** answers questions and uses the team's tools for you.

- In a group, mention me; in a direct message, just write.
- A message sent while I am working is added to the current task.
- Send me images and files (PDF, Word, Excel, PowerPoint, text, code) and ask about them.
- Ask me to do something later or on a rhythm ("every weekday at 9 post the open tasks
  here").
- Some tools act as you in Feishu (your calendar, your tasks, documents you can read):
  the first time, I post a card asking you to authorise it, and carry on once you have.
- Before a tool that changes something runs, I post an approval card: it runs only after
  someone allowed to approve presses **Approve**.

Commands:"""


def help_text(command_lines: list[str]) -> str:
    """/help: what the bot does, then its commands (``bot.runtime.intake.commands``)."""
    return "\n".join([HELP_INTRO, *command_lines])


PLAN_USAGE = (
    "Write the question after `/plan`, for example: `/plan compare the weather in Paris, "
    "London and Tokyo`. I split it into steps, run the independent ones at the same time "
    "and show them as a checklist while they run."
)

STOPPED = "Stopped the reply in progress."
STOPPED_CARD = "_Stopped._"
INTERRUPTED_CARD = "_Interrupted._"  # the turn failed or the bot shut down mid-answer
NOTHING_TO_STOP = "Nothing is running right now."
RESET = "Started a new conversation: earlier messages are forgotten."
# A run saved while it waited for a person, and that does not go on (``parking.py``).
RESET_WHILE_WAITING = (
    "_This request did not go on: the conversation was reset (`/reset`) while it waited. "
    "Ask again if you still need it._"
)
# The note of a wait its saved run went on without (its call was not made again).
RUN_ENDED_WITHOUT_IT = "the request went on without this call after the bot restarted"
NOT_ALLOWED_ANY_MORE = (
    "_This request did not go on: the bot no longer answers in this chat (it was taken "
    "off the allowed chats while the request waited)._"
)


def cannot_resume(why: str) -> str:
    return f"_This request could not go on after the bot restarted: {why}. Please ask again._"


LOGIN_OFF = (
    "Acting as you is not enabled here: no tool uses your own Feishu account. (An admin "
    "turns it on with LARKGATE_TOKEN_KEY.)"
)
LOGIN_NO_TOOLS = "No tool here acts as you in Feishu, so there is nothing to authorise."
LOGIN_ALREADY = (
    "You have already authorised me to act as you for every tool that needs it. "
    "`/logout` withdraws it."
)
LOGGED_OUT = (
    "Done: I no longer act as you in Feishu and have forgotten your authorisation. "
    "(Feishu cannot revoke a token early: the last one I had lapses by itself within two "
    "hours, and I never use it again.)"
)
NOT_LOGGED_IN = "You had not authorised me to act as you, so there was nothing to withdraw."


def login_failed(detail: str) -> str:
    why = f" ({detail})" if detail else ""
    return f"I could not post the authorisation card{why}. Please try again in a minute."


MODEL_UNAVAILABLE = (
    "Sorry, the language model is not reachable right now, so I could not answer. "
    "Please try again in a minute."
)
MODEL_FAILED = "Sorry, something went wrong while I was working on this; please try again."
# The model refused the request for what it is, not for being busy: trying again as it is
# would fail the same way, so these say what to change.
MODEL_CONTEXT_FULL = (
    "Sorry, this conversation no longer fits in what the language model can read, even "
    "summarised. Send /reset to start a new conversation, or ask with less text."
)
MODEL_REFUSED_KEY = (
    "Sorry, the language model refused the bot's credentials, so I could not answer. "
    "An admin needs to check LLM_API_KEY (`larkgate check` shows what the model says)."
)


def model_deadline_passed(seconds: float | None) -> str:
    """The model kept failing (timeouts, errors) until the turn's deadline passed."""
    within = f" within {seconds:g} seconds" if seconds else ""
    return (
        f"Sorry, the language model did not answer{within}, so I stopped waiting. It may "
        "be overloaded or down; please try again in a few minutes."
    )


ANSWER_FAILED = "Sorry, I finished the work but could not write the answer; here is what I found:"


def api_budget_notice(step: str, used: int, budget: int) -> str:
    """To the admins, once a month per step: the Feishu API budget is running low."""
    return (
        f"larkgate has used {used:,} of its {budget:,} Feishu API calls this month "
        f"({used / budget:.0%}). To make them last, answers are now delivered as: {step}. "
        "Raise FEISHU_MONTHLY_API_BUDGET if the tenant's quota allows more."
    )


def api_usage_for_admins(summary: str) -> str:
    """The line /help adds for admins."""
    return f"\n\n_Admins: {summary}._"


MEMORY_OFF = "Memory is off here: I keep nothing between conversations."
