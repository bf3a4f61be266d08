"""The app of the middleware family's workers and producers (``bench/middleware.py``).

Two no-op tasks, one keeping its results, each recording the CPU time of its process
(``records.record_cpu``), and the middleware ``$BENCH_MIDDLEWARE`` names:

* ``none`` (or unset): no middleware, and nothing of ``jsworker._core.middleware`` imported, so this
  module also runs on a jsworker from before middleware existed (the family's ``before`` tree);
* ``all_hooks``: one middleware overriding all three hooks, each doing nothing but count;
* ``around_run``: one overriding only ``around_run``, counting;
* ``header``: one whose ``on_enqueue`` adds one header (the producer's side), counting.

A middleware's counts are written as JSON to ``$BENCH_MIDDLEWARE_COUNTS`` when the worker
stops (an ``on_shutdown`` hook), so the driver can check it ran once per job: one integer
increment per call is all a hook costs beyond being called. ``$BENCH_JSWORKER_FROM``, when
set, is the jsworker package directory this process must import (the tree being measured);
importing any other one is an error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lib import records

import jsworker
from jsworker import App

VARIANTS = ("none", "all_hooks", "around_run", "header")
VARIANT = os.environ.get("BENCH_MIDDLEWARE") or "none"
HEADER = "X-Bench-Trace"

if VARIANT not in VARIANTS:
    raise ImportError(f"BENCH_MIDDLEWARE={VARIANT!r}: one of {', '.join(VARIANTS)}")
_expected = os.environ.get("BENCH_JSWORKER_FROM")
if _expected and Path(jsworker.__file__).resolve().parent != Path(_expected).resolve():
    raise ImportError(f"jsworker imported from {jsworker.__file__}, not from {_expected}")

#: Calls of each hook in this process.
COUNTS = {"on_enqueue": 0, "around_run": 0, "on_settled": 0}


def _middleware(variant: str) -> list[Any]:
    """The middleware of ``variant`` (imported only when there is some)."""
    if variant == "none":
        return []
    from jsworker import Middleware

    class AllHooks(Middleware):
        def on_enqueue(self, job: Any) -> None:
            COUNTS["on_enqueue"] += 1

        async def around_run(self, job: Any, call_next: Any) -> Any:
            COUNTS["around_run"] += 1
            return await call_next()

        async def on_settled(self, job: Any, settled: Any) -> None:
            COUNTS["on_settled"] += 1

    class AroundRun(Middleware):
        async def around_run(self, job: Any, call_next: Any) -> Any:
            COUNTS["around_run"] += 1
            return await call_next()

    class StampHeader(Middleware):
        def on_enqueue(self, job: Any) -> None:
            COUNTS["on_enqueue"] += 1
            job.headers[HEADER] = "1"

    chosen = {"all_hooks": AllHooks, "around_run": AroundRun, "header": StampHeader}[variant]
    return [chosen()]


_chosen = _middleware(VARIANT)
# Passed only when there is middleware: a jsworker from before it takes no such argument.
app = App("benchmw", **({"middleware": _chosen} if _chosen else {}))


@app.task(queue="plain")
async def noop_plain(i: int) -> None:
    """Records that it ran, and its process's CPU time."""
    records.record_cpu(i)


@app.task(queue="results", store_result=True)
async def noop_result(i: int) -> int:
    """The same, keeping its value as the job's result."""
    records.record_cpu(i)
    return i


def write_counts() -> None:
    """The hooks' call counts, to ``$BENCH_MIDDLEWARE_COUNTS`` (if set)."""
    path = os.environ.get("BENCH_MIDDLEWARE_COUNTS")
    if path:
        Path(path).write_text(json.dumps(COUNTS))


if _chosen:
    app.on_shutdown(write_counts)
