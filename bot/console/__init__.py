"""The web console: a JSON API under ``/api``, run events over Server-Sent Events, and a
small page at ``/console`` that reads them (see ``routes`` for the endpoints and their auth).

It sits beside ``bot.feishu``'s routes: the composition root (``bot.app``) adds its routes
and hands it the run event hub, the run store and governance. Nothing below ``bot.app``
imports it.
"""

from bot.console.routes import CONSOLE, Console, add_console

__all__ = ["CONSOLE", "Console", "add_console"]
