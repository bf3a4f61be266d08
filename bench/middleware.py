"""Middleware: what a no-op middleware costs, and that no middleware costs nothing.

Two comparisons, each within one run of the suite:

* **With and without middleware** (today's code): one app (``apps/middleware_app.py``) run
  with no middleware (the baseline), with one no-op middleware overriding all three hooks
  (``on_enqueue``, ``around_run``, ``on_settled``), and with one overriding only
  ``around_run``; for enqueue, with one whose ``on_enqueue`` adds one header.
* **Before and after** a change, with no middleware: the same workloads on the jsworker of
  another commit (``--before REF``, by default :data:`BEFORE`, the commit before middleware
  landed) and on today's (``--after REF``, by default the working tree). Each tree's
  ``jsworker/`` is copied into the suite's scratch directory once, in the first run (a
  commit's with ``git archive``; the repository is not touched), so edits or commits made
  while the suite runs do not change what it measures; the copy is put first on the
  ``PYTHONPATH`` of the processes that run it, and each of them checks it imported that copy.
  The ``none``, ``all_hooks``, ``around_run`` and ``header`` variants run the after tree.

**Processing** drains N pre-enqueued no-op jobs (enqueued by the driver, not timed) with one
``jsworker run -c 100`` worker, as :func:`figures.processing.drain` does: jobs/s between the
first and the last job record, then the app's streams must be empty (and, with results on,
hold N kept results). Results off (``noop_plain``) and on (``noop_result``,
``store_result=True``). Each task also records its process's CPU time, which gives the
worker's CPU per job between the first and the last record: steadier than jobs/s on a shared
machine, as it does not count the time another process held the CPU.

**Enqueue** runs each form in a process of its own (the tree's jsworker, the variant's
middleware): ``adelay_many`` of N items and sequential ``adelay``, with a warm-up call first
(connection set-up not timed), :func:`figures.enqueue._adelay_many_args` and
``_adelay_args``; afterwards the stream must hold exactly N jobs, and with the ``header``
middleware the last one must carry its header.

Variants run one after the other within a run, in reverse order every other run, and the
comparisons are ratios within the run. ``python bench/middleware.py enqueue FORM N`` is the
enqueue process.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apps import middleware_app as mw
from figures import enqueue, processing
from lib import apps, records
from lib import jetstream as jsh
from lib.context import Context
from lib.procs import BENCH_DIR, bench_env, start_worker
from lib.stats import Measurement

import jsworker

#: The commit before middleware landed: the default ``before`` tree.
BEFORE = "5181b60"
REPO = BENCH_DIR.parent
TIMEOUT = 600.0
SETTLE_TIMEOUT = 30.0

PROCESSING_VARIANTS = ("before", "none", "all_hooks", "around_run")
ENQUEUE_VARIANTS = ("before", "none", "header")
FORMS = {"adelay_many": enqueue._adelay_many_args, "adelay": enqueue._adelay_args}
RESULTS = {"results_off": mw.noop_plain, "results_on": mw.noop_result}


# -- the trees measured ----------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """A jsworker to run: a copy of a commit's or of the working tree's ``jsworker/``."""

    name: str  # what the figures' info calls it
    root: Path  # the directory holding the copy of ``jsworker/``

    def env(self, variant: str, **extra: str) -> dict[str, str]:
        """What a process of this tree gets on top of :func:`lib.procs.bench_env`: bench/ and
        the tree first on its path, no script or working directory before them (so
        ``python -m jsworker`` run from the repository cannot import the working tree's)."""
        return {
            "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(self.root)]),
            "PYTHONSAFEPATH": "1",
            "BENCH_MIDDLEWARE": "none" if variant == "before" else variant,
            "BENCH_JSWORKER_FROM": str(self.root / "jsworker"),
            **extra,
        }


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip() or 'unknown revision'}")
    return done.stdout.strip()


def _copy_working_tree(scratch: Path) -> Tree:
    """The working tree's ``jsworker/`` as it is now: other edits during the suite's runs
    do not reach the figures."""
    head = _git("rev-parse", "--short=7", "HEAD")
    changed = _git("status", "--porcelain", "--", "jsworker")
    dest = scratch / "jsworker-working-tree"
    shutil.copytree(REPO / "jsworker", dest / "jsworker", ignore=shutil.ignore_patterns("__pycache__"))
    return Tree(f"working tree (HEAD {head}{' + uncommitted changes' if changed else ''})", dest)


def export(ref: str, scratch: Path) -> Tree:
    """``ref``'s ``jsworker/``, exported with ``git archive`` into ``scratch``."""
    commit = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    dest = scratch / f"jsworker-{commit[:12]}"
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "jsworker"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return Tree(commit[:7] if commit.startswith(ref) else f"{ref} ({commit[:7]})", dest)


#: The trees of each suite run (by its scratch directory), resolved in its first run: a ref
#: such as HEAD that moves during the suite does not change what later runs measure.
_TREES: dict[tuple[Path, str | None, str | None], dict[str, Tree]] = {}


def _trees(ctx: Context, before: str | None, after: str | None) -> dict[str, Tree]:
    """The tree of each variant: ``before`` runs the before tree, every other the after one."""
    key = (ctx.scratch, before, after)
    if key not in _TREES:
        today = _copy_working_tree(ctx.scratch) if after is None else export(after, ctx.scratch)
        trees = {v: today for v in (*PROCESSING_VARIANTS, *ENQUEUE_VARIANTS) if v != "before"}
        if before is not None:
            trees["before"] = export(before, ctx.scratch)
        _TREES[key] = trees
    return _TREES[key]


def _order(variants: tuple[str, ...], ctx: Context, trees: dict[str, Tree]) -> list[str]:
    """The variants of this run in the order they run: reversed every other run."""
    chosen = [v for v in variants if v in trees]
    return chosen if ctx.run % 2 == 0 else chosen[::-1]


# -- processing ------------------------------------------------------------------------------


def _check_counts(path: Path, variant: str, n: int) -> None:
    """The worker's middleware ran once per job (``around_run``; ``on_settled`` for all)."""
    if variant not in ("all_hooks", "around_run"):
        return
    try:
        counts = json.loads(path.read_text())
    except OSError as exc:
        raise RuntimeError(f"{variant}: the worker wrote no middleware counts ({exc})") from None
    want = {"around_run": n, "on_settled": n if variant == "all_hooks" else 0}
    got = {hook: counts[hook] for hook in want}
    if got != want:
        raise RuntimeError(f"{variant}: middleware hooks called {got}, expected {want}")


def _drain(ctx: Context, tree: Tree, variant: str, task: Any, n: int) -> tuple[float, float]:
    """(jobs/s, worker CPU µs per job) of one worker draining ``n`` jobs of ``task``."""
    name = f"mw-{task.queue}-{variant}"
    asyncio.run(apps.purge(ctx.url, mw.app))
    processing.enqueue(ctx.url, task, n)
    counts = ctx.scratch / f"{name}-{ctx.run}.counts"
    env = tree.env(variant, BENCH_MIDDLEWARE_COUNTS=str(counts))
    kept = n if task.options.store_result else 0
    cpu: list[float] = []

    def rate(rows: list[tuple[int, int, int]]) -> float:
        cpu.append(records.cpu_per_job(rows))
        return records.span_rate(rows)

    jobs_s = processing.drain(
        ctx,
        name,
        n,
        lambda rec: [
            start_worker(
                ctx.url,
                rec,
                ctx.log_dir,
                queues=task.queue,
                concurrency=processing.CONCURRENCY,
                module="apps.middleware_app",
                name=name,
                env=env,
            )
        ],
        rate,
        # drain() checks the bench app's stream; this app's must empty (and keep results) too.
        settled=lambda: apps.wait_counts(ctx.url, mw.app, (0, kept), SETTLE_TIMEOUT, name),
    )
    _check_counts(counts, variant, n)
    return jobs_s, cpu[0]


_LABELS = {
    "before": "no middleware, jsworker {tree}",
    "none": "no middleware (baseline), jsworker {tree}",
    "all_hooks": "one no-op middleware, all 3 hooks",
    "around_run": "one no-op middleware, around_run only",
    "header": "one middleware, on_enqueue adds 1 header",
}


def _processing(ctx: Context, trees: dict[str, Tree]) -> list[Measurement]:
    n = ctx.sizes.process_jobs
    found: dict[tuple[str, str], tuple[float, float]] = {}
    results = list(RESULTS) if ctx.run % 2 == 0 else list(RESULTS)[::-1]
    for res in results:
        for variant in _order(PROCESSING_VARIANTS, ctx, trees):
            found[res, variant] = _drain(ctx, trees[variant], variant, RESULTS[res], n)
    asyncio.run(apps.purge(ctx.url, mw.app))
    rates, cpus = [], []
    for res in RESULTS:
        for variant in PROCESSING_VARIANTS:
            if (res, variant) not in found:
                continue
            jobs_s, cpu_us = found[res, variant]
            tree = trees[variant]
            info = {"jobs": n, "concurrency": processing.CONCURRENCY, "jsworker": tree.name}
            label = f"{res.replace('_', ' ')}: " + _LABELS[variant].format(tree=tree.name)
            figure = f"{res}.{variant}"
            rates.append(Measurement(f"middleware.processing.{figure}", jobs_s, "jobs/s", label, info))
            cpu_label = f"worker CPU, {label}"
            cpus.append(Measurement(f"middleware.cpu.{figure}", cpu_us, "us/job", cpu_label, info))
    return rates + cpus


# -- enqueue ---------------------------------------------------------------------------------


async def _last_headers(url: str) -> dict[str, str]:
    nc = await jsh.connect(url)
    try:
        js = nc.jetstream()
        stream = mw.app.namespace.stream
        info = await js.stream_info(stream)
        return dict((await js.get_msg(stream, info.state.last_seq)).headers or {})
    finally:
        await nc.close()


def _produce(ctx: Context, tree: Tree, variant: str, form: str, n: int) -> float:
    """jobs/s of ``form`` in a producer process of ``tree`` with ``variant``'s middleware."""
    asyncio.run(apps.purge(ctx.url, mw.app))
    argv = [sys.executable, str(BENCH_DIR / "middleware.py"), "enqueue", form, str(n)]
    env = bench_env(ctx.url, ctx.record_file("mw-enqueue"), tree.env(variant))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"enqueue {form} {variant}: exit code {done.returncode}\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    stored = asyncio.run(apps.counts(ctx.url, mw.app))
    if stored != (n, 0):
        raise RuntimeError(f"enqueue {form} {variant}: {stored} (jobs, records) stored, not {(n, 0)}")
    if variant == "header":
        if out["on_enqueue"] != n + 1:  # the warm-up call too
            raise RuntimeError(f"enqueue {form}: on_enqueue called {out['on_enqueue']} times for {n + 1}")
        if mw.HEADER not in asyncio.run(_last_headers(ctx.url)):
            raise RuntimeError(f"enqueue {form}: the last job has no {mw.HEADER} header")
    asyncio.run(apps.purge(ctx.url, mw.app))
    return float(out["rate"])


def _enqueue(ctx: Context, trees: dict[str, Tree]) -> list[Measurement]:
    n = ctx.sizes.enqueue_jobs
    found = {
        (form, variant): _produce(ctx, trees[variant], variant, form, n)
        for form in FORMS
        for variant in _order(ENQUEUE_VARIANTS, ctx, trees)
    }
    out = []
    for form in FORMS:
        what = "await adelay_many(N items)" if form == "adelay_many" else "await adelay(), sequential"
        for variant in ENQUEUE_VARIANTS:
            if (form, variant) in found:
                tree = trees[variant]
                label = f"{what}: " + _LABELS[variant].format(tree=tree.name)
                info = {"jobs": n, "jsworker": tree.name}
                rate = found[form, variant]
                out.append(Measurement(f"middleware.enqueue.{form}.{variant}", rate, "jobs/s", label, info))
    return out


def run(ctx: Context, before: str | None = BEFORE, after: str | None = None) -> list[Measurement]:
    """The middleware figures of one run: the before tree at commit ``before`` (None: left
    out), today's at ``after`` (None: the working tree)."""
    trees = _trees(ctx, before, after)
    asyncio.run(apps.using(mw.app, ctx.url, mw.app.provision))
    return [*_processing(ctx, trees), *_enqueue(ctx, trees)]


# -- the enqueue process ---------------------------------------------------------------------


async def _timed(form: Callable[[int], Any], n: int, url: str) -> float:
    task = mw.noop_plain

    async def body() -> float:
        await task.adelay(-1)
        await apps.purge(url, mw.app)
        started = time.perf_counter()
        await form(n)
        return n / (time.perf_counter() - started)

    return float(await apps.using(mw.app, url, body))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "enqueue" or sys.argv[2] not in FORMS:
        sys.exit(f"usage: python {Path(__file__).name} enqueue {{{','.join(FORMS)}}} N")
    jobs = int(sys.argv[3])
    made = FORMS[sys.argv[2]](mw.noop_plain, ())
    rate = asyncio.run(_timed(made, jobs, os.environ["JSWORKER_URL"]))
    print(json.dumps({"rate": rate, "on_enqueue": mw.COUNTS["on_enqueue"], "jsworker": jsworker.__file__}))
