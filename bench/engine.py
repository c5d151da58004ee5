"""Agent-engine overhead: our engine against a bare loop and three peer frameworks.

Every engine runs the workload in ``bench.workload`` against an in-process scripted model
and a trivial tool, so what is left is the engine's own cost per iteration. Run from the
repository root::

    python -m bench.engine [--repeat N] [--quick] [--only NAME ...] [--check]

It prints a report and exits 0; with ``--check`` it exits 1 when a target is missed (or
cannot be evaluated, e.g. our engine did not run).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TypeVar

from bench.workload import MEMORY_SIZE, SIZES

Size = tuple[int, int]  # (iterations, parallel)
T = TypeVar("T")


@dataclass(frozen=True)
class Engine:
    name: str
    module: str
    dists: tuple[str, ...] = ()  # distributions whose versions the report names


OURS = "ours"
FLOOR = "bare-loop"  # the floor, not a peer: left out of the peer targets
ENGINES = (
    Engine(OURS, "bench.ours"),
    Engine(FLOOR, "bench.peers.bare_loop"),
    Engine("langgraph", "bench.peers.langgraph_peer", ("langgraph", "langchain")),
    Engine("pydantic-ai", "bench.peers.pydantic_ai_peer", ("pydantic-ai-slim",)),
    Engine("smolagents", "bench.peers.smolagents_peer", ("smolagents",)),
)

TARGET_US_PER_ITER = 200.0
TARGET_SPEEDUP = 5.0


class WorkloadError(Exception):
    """An engine did not do the work it was given (e.g. skipped tool calls)."""


@dataclass
class Result:
    name: str
    us_per_iter: dict[Size, float] = field(default_factory=dict)
    peak_kib: float | None = None
    error: str | None = None


def runs_for(iterations: int, repeat: int) -> int:
    # A 200-iteration run of a slow peer takes seconds; fewer samples keep the run short.
    return max(1, repeat // 3) if iterations >= 200 else repeat


async def run_checked(module: ModuleType, iterations: int, parallel: int) -> None:
    executed = await module.run_workload(iterations, parallel)
    if executed != iterations * parallel:
        raise WorkloadError(f"executed {executed} tool calls, expected {iterations * parallel}")


async def timed_run(module: ModuleType, size: Size) -> float:
    """Seconds for one run, taken warm.

    An untimed run of the same size goes first: it refills the CPU caches that the engine
    run before left cold (that alone moves a 100 µs/iteration engine by half).
    """
    await run_checked(module, *size)
    # Start the timed run with no garbage left by the previous one to collect.
    gc.collect()
    start = time.perf_counter()
    await run_checked(module, *size)
    return time.perf_counter() - start


async def peak_kib(module: ModuleType) -> float:
    """Peak traced allocation of one run at ``MEMORY_SIZE``, in KiB.

    A separate pass, after timing: tracing slows allocation several-fold.
    """
    gc.collect()
    tracemalloc.start()
    try:
        await run_checked(module, *MEMORY_SIZE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 1024


async def attempt(result: Result, work: Awaitable[T]) -> T | None:
    """Run ``work`` for ``result``'s engine; a failure is recorded, not allowed to stop others."""
    try:
        return await work
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        print(f"  {result.name}: {result.error}", file=sys.stderr)
        return None


async def time_size(
    modules: dict[str, ModuleType], results: dict[str, Result], size: Size, runs: int
) -> None:
    """Median µs per iteration of every engine at ``size``.

    The engines take turns run by run rather than one after another, so a slow spell of
    this (shared, noisy) machine lands on all of them instead of on whichever ran then;
    ``timed_run`` keeps each sample warm all the same.
    """
    live = [name for name in modules if results[name].error is None]
    samples: dict[str, list[float]] = {name: [] for name in live}
    for _ in range(runs):
        for name in live:
            if results[name].error is None:
                elapsed = await attempt(results[name], timed_run(modules[name], size))
                if elapsed is not None:
                    samples[name].append(elapsed)
    cells = []
    for name in live:
        if results[name].error is None:
            us = statistics.median(samples[name]) / size[0] * 1e6
            results[name].us_per_iter[size] = us
            cells.append(f"{name} {us:,.1f}")
    print(f"  {size[0]}×{size[1]}: " + ", ".join(cells) + " µs/iter", file=sys.stderr)


async def run_all(modules: dict[str, ModuleType], repeat: int) -> list[Result]:
    results = {name: Result(name) for name in modules}
    # A first run builds what each engine constructs lazily (agents, graphs, templates).
    for name, module in modules.items():
        await attempt(results[name], run_checked(module, 1, 1))
    # Everything alive now (frameworks and their built agents) is moved out of the
    # collector's sight: the collection before each timed run then walks only that run's
    # leftovers, and one engine's timing does not depend on which others are loaded.
    gc.collect()
    gc.freeze()
    for size in SIZES:
        await time_size(modules, results, size, runs_for(size[0], repeat))
    for name, module in modules.items():
        if results[name].error is None:
            results[name].peak_kib = await attempt(results[name], peak_kib(module))
    return list(results.values())


def load(engines: list[Engine]) -> tuple[dict[str, ModuleType], list[str]]:
    modules, notes = {}, []
    for engine in engines:
        try:
            modules[engine.name] = importlib.import_module(engine.module)
        except ImportError as exc:
            notes.append(f"{engine.name}: skipped, not importable ({exc})")
        except Exception as exc:  # e.g. our engine half-written: report it, run the rest
            notes.append(f"{engine.name}: skipped, import failed ({type(exc).__name__}: {exc})")
    return modules, notes


def versions(engine: Engine) -> str:
    found = []
    for dist in engine.dists:
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{dist} ?")
    return ", ".join(found)


def _cell(value: float | None, width: int = 10) -> str:
    return f"{'–' if value is None else f'{value:,.1f}':>{width}}"


def render_table(results: list[Result], repeat: int) -> str:
    heads = [f"{n}" if p == 1 else f"{n}×{p} par" for n, p in SIZES]
    mem_head = f"KiB@{MEMORY_SIZE[0]}"
    lines = [
        f"µs per iteration (median of {repeat} runs, {runs_for(200, repeat)} at 200 "
        f"iterations); peak traced memory of one {MEMORY_SIZE[0]}-iteration run",
        f"{'engine':<12}" + "".join(f"{h:>10}" for h in heads) + f"{mem_head:>12}",
    ]
    for r in results:
        cells = "".join(_cell(r.us_per_iter.get(size)) for size in SIZES)
        lines.append(f"{r.name:<12}{cells}{_cell(r.peak_kib, 12)}")
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def render_ratios(results: list[Result]) -> str:
    ours = next((r for r in results if r.name == OURS), None)
    base = ours.us_per_iter if ours else {}
    lines = [
        "time per iteration relative to ours, and growth (µs/iter at 200 ÷ at 10)",
        f"{'engine':<12}{'÷ours@10':>10}{'÷ours@200':>11}{'growth':>9}",
    ]
    for r in results:
        at10 = _ratio(r.us_per_iter.get((10, 1)), base.get((10, 1)))
        at200 = _ratio(r.us_per_iter.get((200, 1)), base.get((200, 1)))
        growth = _ratio(r.us_per_iter.get((200, 1)), r.us_per_iter.get((10, 1)))
        cells = [
            f"{'–' if v is None else f'{v:.2f}×':>{w}}"
            for v, w in ((at10, 10), (at200, 11), (growth, 9))
        ]
        lines.append(f"{r.name:<12}{''.join(cells)}")
    return "\n".join(lines)


def check_targets(results: list[Result]) -> list[tuple[bool | None, str]]:
    """Each target as (passed, text); ``None`` when it cannot be evaluated."""
    by_name = {r.name: r for r in results if r.error is None}
    ours = by_name.get(OURS)
    peers = [r for name, r in by_name.items() if name not in (OURS, FLOOR)]
    checks: list[tuple[bool | None, str]] = []
    for size in ((10, 1), (200, 1)):
        text = f"ours ≤ {TARGET_US_PER_ITER:.0f} µs/iter at {size[0]} iterations"
        if ours is None:
            checks.append((None, f"{text} (ours not measured)"))
        else:
            value = ours.us_per_iter[size]
            checks.append((value <= TARGET_US_PER_ITER, f"{text}: {value:,.1f} µs"))

    text = f"ours ≥ {TARGET_SPEEDUP:.0f}× faster than the fastest peer at 10 iterations"
    if ours is None or not peers:
        checks.append((None, f"{text} (ours or peers not measured)"))
    else:
        fastest = min(peers, key=lambda r: r.us_per_iter[(10, 1)])
        speedup = fastest.us_per_iter[(10, 1)] / ours.us_per_iter[(10, 1)]
        checks.append((speedup >= TARGET_SPEEDUP, f"{text}: {speedup:.1f}× vs {fastest.name}"))

    text = "ours peak memory ≤ the lowest peer's"
    if ours is None or not peers:
        checks.append((None, f"{text} (ours or peers not measured)"))
    else:
        # Engines without an error have a peak: it is the last thing measured.
        lowest = min(peers, key=lambda r: r.peak_kib or 0.0)
        ours_kib, lowest_kib = ours.peak_kib or 0.0, lowest.peak_kib or 0.0
        checks.append(
            (
                ours_kib <= lowest_kib,
                f"{text}: {ours_kib:,.0f} KiB vs {lowest_kib:,.0f} KiB ({lowest.name})",
            )
        )
    return checks


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=15,
        help="timed runs per size (a third of that at 200 iterations)",
    )
    parser.add_argument("--quick", action="store_true", help="3 timed runs per size")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=[e.name for e in ENGINES],
        metavar="NAME",
        help=f"engines to run, of: {', '.join(e.name for e in ENGINES)}",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repeat = min(args.repeat, 3) if args.quick else args.repeat
    chosen = [e for e in ENGINES if not args.only or e.name in args.only]
    modules, notes = load(chosen)
    # One event loop for the whole benchmark, so no engine pays for creating one.
    results = asyncio.run(run_all(modules, repeat))

    print(f"Python {platform.python_version()} on {platform.machine()}")
    for engine in chosen:
        if engine.name in modules and engine.dists:
            print(f"  {engine.name}: {versions(engine)}")
    print()
    print(render_table(results, repeat))
    for note in notes + [f"{r.name}: failed, {r.error}" for r in results if r.error]:
        print(f"  note: {note}")
    print()
    print(render_ratios(results))
    print()
    print("targets")
    checks = check_targets(results)
    for passed, text in checks:
        print(f"  {'n/a ' if passed is None else 'PASS' if passed else 'FAIL'}  {text}")
    return 1 if args.check and not all(passed for passed, _ in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
