"""Memory people can see and erase: the model's ``remember`` and ``forget`` tools, the
recall that puts a question's relevant memories into the run's instructions, and the rules
of who may read what (``Readable``), kept where memories are read (``bot.store.memories``).
"""
