"""Sync tasks with ``executor="process"`` in a real ``jsworker run``: they run in processes of
the worker's own, their arguments and results cross as the app's serializer encodes them, and
what they raise, their timeouts and their cancels end as a thread run's would; a timeout or a
cancel also stops the process, and a task process never outlives its worker."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jsworker import App, JobCancelled, JobFailed
from jsworker._deadletters import DeadLetter, DeadLetters
from jsworker._lifecycle.state import JobState
from jsworker.testing import NatsServer

from ..support import wait_until
from .workers import APPS, start_worker, stop

sys.path.insert(0, str(APPS))
import process_app

RESULT_WAIT = 30.0


@pytest.fixture(scope="module")
def worker(nats_server_module: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A ``jsworker run process_app`` process (default pool size), and process_app producing
    to its server; yields the worker's process."""
    logs = tmp_path_factory.mktemp("process-worker")
    process_app.app.servers = [nats_server_module.url]
    proc = start_worker(
        nats_server_module.url, logs / "record", logs / "worker.log", "--grace", "1", module="process_app"
    )
    yield proc
    stop(proc)
    process_app.app.close()


def alive(pid: int) -> bool:
    """Whether a process with this id exists (a zombie counts as gone: it is not running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def parent_of(pid: int) -> int:
    """The parent process id of ``pid``."""
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def announced_pid(pidfile: Path) -> int:
    """The pid a task wrote to ``pidfile`` once it started."""
    wait_until(pidfile.exists, timeout=RESULT_WAIT, message=f"the task to write {pidfile.name}")
    return int(pidfile.read_text())


def dead_letter(job_id: str) -> DeadLetter:
    """The dead letter of ``job_id``."""

    async def main() -> DeadLetter:
        try:
            async with DeadLetters(process_app.app) as letters:
                return await letters.get(job_id)
        finally:
            await process_app.app.aclose()

    return asyncio.run(main())


def test_a_process_task_runs_in_a_process_of_the_worker(worker: subprocess.Popen[bytes]) -> None:
    """The task's pid is neither the worker's nor ours, the worker is its parent, and the
    next call is answered by the same process."""
    pid = process_app.whoami.delay().result(timeout=RESULT_WAIT)
    assert pid not in (worker.pid, os.getpid())
    assert parent_of(pid) == worker.pid
    assert process_app.whoami.delay().result(timeout=RESULT_WAIT) == pid


def test_arguments_and_results_round_trip(worker: subprocess.Popen[bytes]) -> None:
    """Positional, default, keyword-only and nested arguments arrive as sent; annotated ones
    are converted to their types in the process; current_job() there names the job."""
    job = process_app.combine.delay([1, 2, 3], 2, label="x", extra={"nested": [1, None, "a"]})
    assert job.result(timeout=RESULT_WAIT) == {"total": 12, "label": "x", "extra": {"nested": [1, None, "a"]}}
    assert process_app.combine.delay([4], label="y").result(timeout=RESULT_WAIT)["total"] == 4
    when = datetime(2024, 1, 1, tzinfo=UTC)
    later = process_app.later.delay(when, timedelta(hours=1)).result(timeout=RESULT_WAIT)
    assert later == "2024-01-01T01:00:00+00:00"
    job = process_app.whereami.delay()
    assert job.result(timeout=RESULT_WAIT) == {
        "id": job.id,
        "task": "whereami",
        "queue": "default",
        "attempt": 1,
        "cancelled": False,
    }


def test_a_failure_keeps_its_type_message_and_traceback(worker: subprocess.Popen[bytes]) -> None:
    """A ValueError raised in the process: dead-lettered (no retries) with its type, message
    and the traceback from the process, in the job's result and in its dead letter."""
    job = process_app.explode.delay(7)
    with pytest.raises(JobFailed) as caught:
        job.result(timeout=RESULT_WAIT)
    assert (caught.value.error_type, caught.value.error_message) == ("ValueError", "explode 7")
    assert 'raise ValueError(f"explode {n}")' in (caught.value.traceback or "")
    letter = dead_letter(job.id)
    assert (letter.error_type, letter.error) == ("ValueError", "explode 7")
    assert "in explode" in (letter.traceback or "")


def test_retries_are_decided_against_the_real_exception(worker: subprocess.Popen[bytes]) -> None:
    """An exception in dont_retry_on is dead-lettered after one attempt although attempts are
    left; Retry asks for another attempt, which succeeds."""
    job = process_app.unlucky.delay()
    with pytest.raises(JobFailed, match="not retryable") as caught:
        job.result(timeout=RESULT_WAIT)
    assert (caught.value.error_type, caught.value.error_message) == ("Unlucky", "not today")
    assert dead_letter(job.id).attempts == 1
    assert process_app.flaky.delay().result(timeout=RESULT_WAIT) == 2


def test_an_unencodable_return_value_fails_as_in_a_thread(worker: subprocess.Popen[bytes]) -> None:
    """A set is no JSON: the job fails at once with that reason and no retry."""
    job = process_app.unencodable.delay()
    with pytest.raises(JobFailed, match="return value cannot be encoded with application/json") as caught:
        job.result(timeout=RESULT_WAIT)
    assert caught.value.error_type == "TypeError"
    assert dead_letter(job.id).attempts == 1


def test_a_process_that_dies_fails_the_job_which_is_retried(worker: subprocess.Popen[bytes]) -> None:
    """os._exit() in the task: the worker goes on, the job is tried again (max_retries=1),
    then dead-lettered naming the exit; the next job gets a new process."""
    job = process_app.vanish.delay()
    with pytest.raises(JobFailed, match="exited with code 3") as caught:
        job.result(timeout=RESULT_WAIT)
    assert caught.value.error_type == "ProcessExited"
    assert dead_letter(job.id).attempts == 2
    assert worker.poll() is None
    assert alive(process_app.whoami.delay().result(timeout=RESULT_WAIT))


def test_a_timeout_kills_the_process(worker: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """An endless CPU loop past its 0.5 s timeout: the job times out (no retries left) and
    its process is killed, not left spinning; the next job runs in another process."""
    pidfile = tmp_path / "spin.pid"
    job = process_app.spin.delay(str(pidfile))
    with pytest.raises(JobFailed, match=r"timed out after 0\.5s"):
        job.result(timeout=RESULT_WAIT)
    spun = announced_pid(pidfile)
    wait_until(lambda: not alive(spun), timeout=10, message=f"process {spun} to be killed")
    assert process_app.whoami.delay().result(timeout=RESULT_WAIT) != spun


def test_a_cancel_kills_the_process(worker: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """app.cancel of a running process task: the job is cancelled and its process killed."""
    pidfile = tmp_path / "hold.pid"
    job = process_app.hold.delay(str(pidfile))
    held = announced_pid(pidfile)
    assert process_app.app.cancel(job.id)
    with pytest.raises(JobCancelled):
        job.result(timeout=RESULT_WAIT)
    assert process_app.app.status(job.id).state is JobState.CANCELLED
    wait_until(lambda: not alive(held), timeout=10, message=f"process {held} to be killed")


@pytest.mark.parametrize(
    ("sig", "ended"),
    [(signal.SIGTERM, "be killed past the grace period"), (signal.SIGKILL, "end with its worker")],
)
def test_a_task_process_does_not_outlive_its_worker(
    nats_server: NatsServer, tmp_path: Path, sig: signal.Signals, ended: str
) -> None:
    """A worker stopped while its process task runs: after SIGTERM and its grace period (the
    worker stops cleanly, the process is killed), or killed with -9 (the process ends too)."""
    producer = App("proc", nats_server.url)

    @producer.task(name="hold")
    def hold(pidfile: str) -> None: ...

    log = tmp_path / "worker.log"
    proc = start_worker(nats_server.url, tmp_path / "record", log, "--grace", "0.5", module="process_app")
    try:
        hold.delay(str(tmp_path / "hold.pid"))
        held = announced_pid(tmp_path / "hold.pid")
        proc.send_signal(sig)
        assert proc.wait(timeout=RESULT_WAIT) == (0 if sig is signal.SIGTERM else -signal.SIGKILL), (
            log.read_text()
        )
        wait_until(lambda: not alive(held), timeout=10, message=f"process {held} to {ended}")
    finally:
        stop(proc)
        producer.close()


def test_a_worker_refuses_a_process_task_it_cannot_find(nats_server: NatsServer, tmp_path: Path) -> None:
    """The task's function name holds the function, not the task: the worker exits 2 at
    start, saying so, before it runs anything."""
    log = tmp_path / "worker.log"
    proc = start_worker(nats_server.url, tmp_path / "record", log, module="process_unfindable_app")
    try:
        assert proc.wait(timeout=RESULT_WAIT) == 2
    finally:
        stop(proc)
    said = log.read_text()
    assert "process_unfindable_app.crunch is function" in said and "not the task" in said
