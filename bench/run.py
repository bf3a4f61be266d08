"""The jsworker benchmark suite: every figure next to raw nats-py on the same server, same run.

    python bench/run.py [--quick] [--runs 3] [--only enqueue,processing] [--peers] [--pending N]
                        [--before REF] [--after REF] [--json-out FILE]

Starts its own nats-server (free loopback port, temporary store), runs each selected figure
family once per run, round-robin (so drifting machine load hits every figure alike), and
prints a table of medians with min-max over runs, then one JSON line per figure. Exits 1
when a figure family failed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet
import lifecycle
import middleware
import schedules
from figures import enqueue, latency, memory, mixed, processing
from lib import jetstream as jsh
from lib.context import NORMAL, QUICK, Context
from lib.report import json_lines, table
from lib.stats import Measurement, summarize
from lib.targets import compare

from jsworker._server import NatsServer

FAMILIES = {
    "enqueue": enqueue.run,
    "processing": processing.run,
    "latency": latency.run,
    "mixed": mixed.run,
    "memory": memory.run,
    "schedules": schedules.run,
    "lifecycle": lifecycle.run,
    "fleet": fleet.run,
    "middleware": middleware.run,
}
# The schedules family keeps its baselines next to its figures, in its own module.


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small job counts: a fast smoke run")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument("--only", default="", help=f"comma-separated families: {', '.join(FAMILIES)}, peers")
    parser.add_argument(
        "--peers", action="store_true", help="also run taskiq-nats and Dramatiq (installs them)"
    )
    parser.add_argument(
        "--pending",
        type=int,
        help=f"delayed jobs the schedules family keeps pending on its server, and jobs the lifecycle "
        f"family leaves waiting on its servers "
        f"(default {schedules.NORMAL_PENDING:,}; {schedules.QUICK_PENDING:,} with --quick)",
    )
    parser.add_argument(
        "--before",
        default=middleware.BEFORE,
        help=f"the commit whose jsworker the middleware family measures as 'before' (default "
        f"{middleware.BEFORE}, the commit before middleware; 'none' leaves those figures out)",
    )
    parser.add_argument(
        "--after",
        help="the commit whose jsworker the middleware family measures as today's "
        "(default: the working tree)",
    )
    parser.add_argument("--json-out", type=Path, help="also write the JSON lines to this file")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.pending is not None and args.pending < schedules.MIN_PENDING:
        parser.error(f"--pending must be at least {schedules.MIN_PENDING}")
    wanted = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in FAMILIES and n != "peers"]
    if unknown:
        parser.error(f"unknown figure family: {', '.join(unknown)} (known: {', '.join(FAMILIES)}, peers)")
    if "peers" in wanted:
        args.peers = True
    args.families = [n for n in FAMILIES if not wanted or n in wanted]
    if args.peers:
        args.families.append("peers")
    return args


def _meta(args: argparse.Namespace) -> dict[str, object]:
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "mode": "quick" if args.quick else "normal",
        "runs": args.runs,
        "families": args.families,
    }


def _run_all(
    args: argparse.Namespace, families: dict, server: NatsServer, scratch: Path
) -> tuple[list, list[str]]:  # type: ignore[type-arg]
    url = server.url
    ctx = Context(url, QUICK if args.quick else NORMAL, scratch, server_pid=server.pid)
    asyncio.run(jsh.provision(url))
    runs: list[list[Measurement]] = []
    failures: list[str] = []
    for r in range(args.runs):
        ctx.run = r
        this_run: list[Measurement] = []
        for name in args.families:
            started = time.monotonic()
            print(f"run {r + 1}/{args.runs}: {name} ...", file=sys.stderr, flush=True)
            try:
                this_run.extend(families[name](ctx))
            except Exception:
                failures.append(f"run {r + 1} {name}")
                traceback.print_exc()
            print(
                f"run {r + 1}/{args.runs}: {name} {time.monotonic() - started:.1f}s",
                file=sys.stderr,
                flush=True,
            )
        runs.append(this_run)
    return runs, failures


def main(argv: list[str] | None = None) -> int:
    """Run the suite; the exit code."""
    args = _parse(argv)
    families = dict(FAMILIES)
    families["schedules"] = functools.partial(schedules.run, pending=args.pending)
    families["lifecycle"] = functools.partial(lifecycle.run, pending=args.pending)
    before = None if args.before.lower() == "none" else args.before
    families["middleware"] = functools.partial(middleware.run, before=before, after=args.after)
    if args.peers:
        from peers import figures as peer_figures

        families["peers"] = peer_figures.run
    meta = _meta(args)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jsw-bench-") as tmp, NatsServer() as server:
        runs, failures = _run_all(args, families, server, Path(tmp))
    meta["seconds"] = round(time.monotonic() - started, 1)
    summaries = summarize(runs)
    verdicts = compare(runs, summaries)
    print(table(summaries, verdicts, meta))
    lines = json_lines(summaries, verdicts, meta)
    for line in lines:
        print(line)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text("\n".join(lines) + "\n")
    if failures:
        print(f"FAILED: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
