"""Acting as Feishu toward the bot's webhook: the product's pushes, for the tests.

They live in :mod:`bot.sandbox.push` (``larkgate dev`` pushes with them too).
"""

from bot.sandbox.push import *  # noqa: F403
from bot.sandbox.push import __doc__ as _push_doc

__doc__ = f"{__doc__}\n{_push_doc}"
