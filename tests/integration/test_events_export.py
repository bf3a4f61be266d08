"""Exporting job events to Parquet from a real nats-server: exact rows, time windows, file
splitting, continuing by sequence, a stream that keeps growing, and the command's exit codes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import nats
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner

from jsworker import App
from jsworker._cli import cli
from jsworker._server import NatsServer
from jsworker.events import JobEvent, encode_event
from jsworker.events._export import export_events
from jsworker.events._reader import EventsNotFound
from jsworker.jetstream.connection import Connection

from ..events_data import moment_after, store_events
from ..support import REFUSED_QUICKLY, stream_state_async, wait_until_async

pytestmark = pytest.mark.timeout(60)

T0 = 1_790_000_000.0


def _events(n: int, job: str = "j") -> list[JobEvent]:
    """n events cycling through the kinds, with every optional field used somewhere."""
    out = []
    for i in range(n):
        kind = ("enqueued", "started", "succeeded", "failed", "retried")[i % 5]
        out.append(
            JobEvent(
                event=kind,
                job_id=f"{job}{i // 5}",
                task="charge" if i % 2 else "mail",
                queue="default",
                ts=T0 + i + 0.25,
                attempt=None if kind == "enqueued" else 1 + i % 3,
                worker=None if kind == "enqueued" else "host:42",
                enqueued_at=T0 if kind in ("enqueued", "started") else None,
                queue_wait=0.5 if kind == "started" else None,
                duration=1.5 if kind in ("succeeded", "failed") else None,
                outcome="failed" if kind == "failed" else None,
                reason="ValueError: no" if kind == "failed" else None,
                delay=2.0 if kind == "retried" else None,
            )
        )
    return out


def _expected(seq: int, e: JobEvent) -> dict[str, object]:
    def dt(t: float | None) -> datetime | None:
        return None if t is None else datetime.fromtimestamp(t, UTC)

    return {
        "seq": seq,
        "event": e.event,
        "job_id": e.job_id,
        "task": e.task,
        "queue": e.queue,
        "ts": dt(e.ts),
        "attempt": e.attempt,
        "worker": e.worker,
        "enqueued_at": dt(e.enqueued_at),
        "queue_wait": e.queue_wait,
        "duration": e.duration,
        "outcome": e.outcome,
        "reason": e.reason,
        "delay": e.delay,
    }


def _read(directory: Path) -> list[dict[str, object]]:
    files = sorted(directory.glob("*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


@pytest.fixture
def app(nats_server_module: NatsServer, request: pytest.FixtureRequest) -> Iterator[App]:
    """An app of its own per test (own events stream), with its streams created."""
    name = f"ex{abs(hash(request.node.name)) % 10**8}"
    app = App(name, nats_server_module.url, events=True)

    async def provision() -> None:
        conn = await Connection.open(app.connect_options("operator", "test"))
        try:
            await app.provision_streams(conn)
        finally:
            await conn.close()

    asyncio.run(provision())
    yield app


def test_exact_rows_and_undecodable_messages_are_counted(app: App, tmp_path: Path) -> None:
    events = _events(7)
    bodies: list[bytes | JobEvent] = [*events[:3], b"not json", *events[3:], b'{"v":1,"event":"x"}']
    seqs = asyncio.run(store_events(app, bodies))
    report = export_events(app, tmp_path, since="1h")
    assert (report.events, report.skipped) == (7, 2)
    assert (report.first_seq, report.last_seq) == (1, 8)
    assert [p.name for p in report.files] == ["events-1-8.parquet"]
    event_seqs = [s for s, b in zip(seqs, bodies, strict=True) if isinstance(b, JobEvent)]
    assert _read(tmp_path) == [_expected(s, e) for s, e in zip(event_seqs, events, strict=True)]
    schema = pq.read_schema(report.files[0])
    assert str(schema.field("ts").type) == "timestamp[us, tz=UTC]"
    assert str(schema.field("attempt").type) == "int32"


def test_since_and_until_select_by_storage_time(app: App, tmp_path: Path) -> None:
    before = asyncio.run(store_events(app, list(_events(3, "a"))))
    since = moment_after(app, before[-1])
    middle = asyncio.run(store_events(app, list(_events(4, "b"))))
    until = moment_after(app, middle[-1])
    asyncio.run(store_events(app, list(_events(2, "c"))))

    report = export_events(app, tmp_path / "window", since=since, until=until)
    assert [r["seq"] for r in _read(tmp_path / "window")] == middle
    assert report.events == 4
    iso = datetime.fromtimestamp(since, UTC).isoformat()
    export_events(app, tmp_path / "from", since=iso)
    assert [r["seq"] for r in _read(tmp_path / "from")] == [*middle, 8, 9]
    assert export_events(app, tmp_path / "future", since=time.time() + 60).events == 0
    assert export_events(app, tmp_path / "future", since="2999-01-01").events == 0
    assert not (tmp_path / "future").exists()


def test_files_split_at_rows_per_file_and_an_export_continues_by_sequence(app: App, tmp_path: Path) -> None:
    asyncio.run(store_events(app, [*_events(5)[:2], b"\xff", *_events(5)[2:]]))
    report = export_events(app, tmp_path, since="1d", rows_per_file=2)
    assert [p.name for p in report.files] == [
        "events-1-2.parquet",
        "events-4-5.parquet",
        "events-6-6.parquet",
    ]
    assert [r["seq"] for r in _read(tmp_path)] == [1, 2, 4, 5, 6]
    assert report.next_seq == 7
    asyncio.run(store_events(app, list(_events(2, "later"))))
    more = export_events(app, tmp_path / "more", start_seq=report.next_seq)
    assert [r["seq"] for r in _read(tmp_path / "more")] == [7, 8]
    assert more.skipped == 0


def test_export_ends_at_the_last_event_stored_when_it_began(app: App, tmp_path: Path) -> None:
    url = app.servers[0]
    asyncio.run(store_events(app, list(_events(2000))))

    async def export_while_publishing() -> tuple[int, int]:
        stop = asyncio.Event()

        async def keep_publishing() -> None:
            nc = await nats.connect(url)
            subject = app.namespace.event_subject("default", "mail", "started")
            body = encode_event(_events(2)[1])
            while not stop.is_set():
                await nc.publish(subject, body)
                # A trickle, not a flood: the bound on how far the export runs past its start,
                # below, is counted in these.
                await asyncio.sleep(0.001)
            await nc.close()

        publisher = asyncio.create_task(keep_publishing())
        stream = app.namespace.events_stream
        # The stream is growing: the export below begins while events keep arriving.
        grown = await wait_until_async(
            lambda: stream_state_async(url, stream),
            until=lambda state: state.last_seq > 2000,
            message="the publisher's first events",
        )
        last = grown.last_seq
        report = await asyncio.to_thread(export_events, app, tmp_path, since="1h")
        stop.set()
        await publisher
        return last, report.last_seq or 0

    last_at_start, exported_last = asyncio.run(export_while_publishing())
    seqs = [r["seq"] for r in _read(tmp_path)]
    assert seqs == list(range(1, exported_last + 1))
    assert last_at_start <= exported_last < last_at_start + 200


def test_no_events_stream(nats_server_module: NatsServer, tmp_path: Path) -> None:
    with pytest.raises(EventsNotFound, match=r"JSW_NEVER_EVENTS.*events=True"):
        export_events(App("never", nats_server_module.url), tmp_path, since="1h")


@pytest.fixture
def app_module(app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module ``evapp`` in the current directory naming the test's app."""
    (tmp_path / "evapp.py").write_text(f"from jsworker import App\napp = App({app.name!r}, events=True)\n")
    monkeypatch.chdir(tmp_path)
    return "evapp"


def test_command(app: App, app_module: str, tmp_path: Path) -> None:
    asyncio.run(store_events(app, [*_events(3), b"junk"]))
    url = app.servers[0]
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(
        cli, ["events", "export", app_module, "--since", "10m", "--to", str(out), "--url", url]
    )
    assert result.exit_code == 0, result.output
    assert "exported 3 event(s), seq 1..3" in result.output
    assert "1 message(s) skipped" in result.output
    assert "--from-seq 5" in result.output  # after the skipped message too
    assert [r["seq"] for r in _read(out)] == [1, 2, 3]

    args = ["events", "export", app_module, "--to", str(out), "--url", url]
    assert runner.invoke(cli, [*args, "--since", "yesterday"]).exit_code == 2
    assert runner.invoke(cli, args).exit_code == 2  # no start given
    assert runner.invoke(cli, [*args, "--since", "1h", "--until", "2h"]).exit_code == 2
    result = runner.invoke(cli, [*args, "--from-seq", "4"])
    assert result.exit_code == 0 and "no events to export; 1 message(s) skipped" in result.output


def test_command_exit_codes_without_stream_or_server(app_module: str, tmp_path: Path) -> None:
    runner = CliRunner()
    (tmp_path / "other.py").write_text("from jsworker import App\napp = App('noevents')\n")
    out = str(tmp_path / "out")
    with NatsServer() as server:
        result = runner.invoke(
            cli, ["events", "export", "other", "--since", "1h", "--to", out, "--url", server.url]
        )
        assert result.exit_code == 2 and "events=True" in result.output
        url = server.url
    result = runner.invoke(
        cli, ["events", "export", "other", "--since", "1h", "--to", out, "--url", url], env=REFUSED_QUICKLY
    )
    assert result.exit_code == 3 and "cannot connect" in result.output
