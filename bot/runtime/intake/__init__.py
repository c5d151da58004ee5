"""From a push to a routed message: the claim behind the ACK (``claims``), the chat policy,
commands and who is asked (``routing``, ``commands``, ``admission``), other bots
(``bot_peers``), logins, and files waiting for their question."""
