"""Per-user authorisation (issue 18): tools that act as the person who asks.

A tool declared ``acts_as="user"`` calls Feishu with the asker's own user token. Before it
runs, :class:`~.gate.UserAuthorizationGate` (a PreToolUse hook) makes sure the asker has
granted what it needs: if not, it posts an authorisation card and waits for the consent
(the callback, or the device-code poll, may complete it on any replica). Inside the tool,
:class:`~.source.UserTokens` hands out a fresh token of the asker, never anyone else's.
"""
