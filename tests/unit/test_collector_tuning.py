"""A running worker process tunes the cyclic garbage collector once its worker has started."""

from __future__ import annotations

import asyncio
import gc
from typing import Any, cast

from jsworker._cli import worker_process
from jsworker._cli.worker_process import YOUNG_GENERATION


class _Started:
    def __init__(self) -> None:
        self.started = asyncio.Event()


def test_once_started_what_exists_is_frozen_and_young_collections_come_less_often() -> None:
    before = gc.get_threshold()
    worker = _Started()

    async def main() -> tuple[int, int]:
        tuning = asyncio.create_task(worker_process._freeze_when_started(cast(Any, worker)))
        await asyncio.sleep(0)
        untouched = gc.get_threshold()[0]  # not before the worker has started
        worker.started.set()
        await tuning
        return untouched, gc.get_threshold()[0]

    try:
        untouched, young = asyncio.run(main())
        assert untouched == before[0]
        assert young == YOUNG_GENERATION > before[0]
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
