"""Peer engines for ``bench.engine``.

Each module exposes ``NAME`` and ``async run_workload(iterations, parallel) -> int``
(the number of tool calls actually executed). A module imports its framework at import
time, so a framework that is not installed surfaces as ``ImportError`` and is skipped.
"""
