"""A running worker process tunes the cyclic garbage collector once its worker has started."""

from __future__ import annotations

import json
import subprocess
import sys

from jsworker._cli.worker_process import YOUNG_GENERATION

# Run in a process of its own: freezing and unfreezing the collector here would change when
# the test process collects what earlier tests left.
_PROBE = """
import asyncio, gc, json
from jsworker._cli import worker_process

class Watched(asyncio.Event):
    # The worker's start, which says when something waits for it.

    def __init__(self):
        super().__init__()
        self.awaited = asyncio.Event()

    async def wait(self):
        self.awaited.set()
        return await super().wait()

class Started:
    def __init__(self):
        self.started = Watched()

async def main():
    worker = Started()
    before = gc.get_threshold()
    tuning = asyncio.create_task(worker_process._freeze_when_started(worker))
    await worker.started.awaited.wait()  # the tuning task now waits for the start
    untouched = gc.get_threshold() == before and gc.get_freeze_count() == 0
    worker.started.set()
    await tuning
    return {"before": before, "untouched": untouched, "after": gc.get_threshold(),
            "frozen": gc.get_freeze_count()}

print(json.dumps(asyncio.run(main())))
"""


def test_once_started_what_exists_is_frozen_and_young_collections_come_less_often() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(out.stdout)
    assert seen["untouched"], seen  # nothing before the worker has started
    assert seen["after"] == [YOUNG_GENERATION, *seen["before"][1:]]
    assert seen["before"][0] < YOUNG_GENERATION
    assert seen["frozen"] > 0
