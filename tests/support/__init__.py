"""Helpers shared across the test tree (import them as ``support.<module>``).

- ``waiting``: ``wait_until`` polls an observable condition, with a timeout.
- ``servers``: aiohttp apps served on 127.0.0.1 at a free port, and the base of the fakes.
- ``postgres``: scratch PostgreSQL databases and schemas, made and dropped over asyncpg.
- ``cards``: walking a Feishu card's JSON for its elements, texts and buttons.
- ``feishu``: a ``FeishuConfig`` pointing at a fake Feishu.
- ``deploy``: the write tool that waits for an approval, and a model that calls it.
- ``processes``: ``larkgate serve`` as a real process, and waiting for it to be healthy.
- ``sandbox``: ``larkgate dev``'s ``Sandbox`` started on the fake model.
- ``env``: the bot's settings removed from the environment.
"""
