"""``larkgate dev``: the real bot, a Feishu emulator and a chat page, in one process.

Only the model is real. The bot (:func:`bot.app.create_app`, unchanged) talks to
:mod:`bot.sandbox.emulator` as it talks to Feishu; the chat page (:mod:`bot.sandbox.page`)
lets a person write as an ordinary user or the admin, in a DM or a group, attach images
and files (:mod:`bot.sandbox.attachments`, seeded with their bytes in the emulator), and
pushes each message to the bot as Feishu would (:mod:`bot.sandbox.push`: signed,
encrypted). Nothing but :mod:`bot.cli` imports this package.
"""
