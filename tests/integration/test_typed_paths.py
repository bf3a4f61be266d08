"""pathlib paths as typed arguments through a real server and worker, and an argument that
cannot be encoded refused before anything is sent."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import pytest

from jsworker import App
from jsworker.testing import NatsServer

from ..support import stream_state_async, wait_until_async
from .workers import in_process_worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@dataclasses.dataclass
class Upload:
    source: pathlib.Path
    meta: dict[str, Any]


class Opaque:
    """A class no converter knows."""


def _app(url: str, got: list[dict[str, Any]]) -> App:
    app = App("paths", url)

    @app.task(max_retries=0)
    async def ingest(upload: Upload, dest: pathlib.PurePosixPath, extra: list[pathlib.Path]) -> None:
        got.append({"upload": upload, "dest": dest, "extra": extra})

    return app


async def test_paths_arrive_as_the_annotated_classes(nats_server: NatsServer) -> None:
    got: list[dict[str, Any]] = []
    app = _app(nats_server.url, got)
    sent = {
        "upload": Upload(pathlib.Path("/srv/in/a.csv"), {"rows": 3}),
        "dest": pathlib.PurePosixPath("out/a.parquet"),
        "extra": [pathlib.Path("b.csv")],
    }
    async with in_process_worker(app):
        await app.tasks["ingest"].adelay(**sent)
        await wait_until_async(lambda: len(got) == 1, timeout=20, message="the job to run")
    assert got == [sent]
    assert type(got[0]["dest"]) is pathlib.PurePosixPath
    assert isinstance(got[0]["upload"].source, pathlib.Path)


async def test_an_argument_that_cannot_be_encoded_sends_nothing(nats_server: NatsServer) -> None:
    app = _app(nats_server.url, [])
    ingest = app.tasks["ingest"]
    await ingest.adelay(Upload(pathlib.Path("a"), {}), pathlib.PurePosixPath("b"), [])
    before = (await stream_state_async(nats_server.url, "JSW_PATHS")).last_seq
    with pytest.raises(
        TypeError, match=r"argument 'upload' \(Upload\): upload\.meta\['by'\] has type Opaque"
    ):
        await ingest.adelay(Upload(pathlib.Path("a"), {"by": Opaque()}), pathlib.PurePosixPath("b"), [])
    await app.aclose()
    assert (await stream_state_async(nats_server.url, "JSW_PATHS")).last_seq == before
