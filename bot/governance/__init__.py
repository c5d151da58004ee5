"""Governance: approvals, read-only org mode, admin commands, audit and budgets.

Everything here acts through the engine's hooks or before a run starts, so the model can
neither see around nor talk its way past it. See DESIGN §2.
"""
