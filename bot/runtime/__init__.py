"""The message pipeline: the only place where Feishu, conversations and the engine meet.

intake (ACK path: claim and schedule) → messages (normalise, policy, commands) →
conversation workers → turns (run the agent, reply, persist).
"""
