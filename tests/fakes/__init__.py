"""Reusable fakes for tests: in-process stand-ins for the services the bot talks to."""
