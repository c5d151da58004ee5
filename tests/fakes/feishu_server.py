"""The fake Feishu OpenAPI server of the tests: the product's Feishu emulator.

It lives in :mod:`bot.sandbox.emulator` (``larkgate dev`` runs it too); its module
docstring describes the endpoints, the inspection helpers and the fault controls.
"""

from bot.sandbox.emulator import *  # noqa: F403
from bot.sandbox.emulator import __doc__ as _emulator_doc

__doc__ = f"{__doc__}\n{_emulator_doc}"
