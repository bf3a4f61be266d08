"""``map_dataframe``: a DataFrame's rows as jobs, and their results joined back to the rows.

1. Each row's job id, from its key (:func:`~._results.with_job_ids`), collected on the driver.
2. The driver subscribes to the app's job records (``$KV.jsw_<app>_jobs.>``, which producers
   may), then the rows are written as jobs (the ``jsworker`` writer), which reports the
   stream sequence of each job's message: a duplicate's is the job the server already had, so
   writing the same rows again within the duplicate window waits for the same jobs.
3. The driver waits until every job has a finished record of its own message: those heard on
   the subscription, and those read from the bucket once the write ended (jobs that had
   finished before, or while the connection was down), up to ``timeout``.
4. The results are read in the DataFrame's own partitions (:func:`~._results.read_results`)
   and joined to the rows' keys; a job that did not finish in time has its status's state.

Only ids and sequences pass through the driver (about 100 bytes a row), never results.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import ConfigurationError, SerializationError
from .._lifecycle.bucket import Records
from .._lifecycle.state import JobRecord
from ..jetstream.connection import Connection
from ..jetstream.listen import listen
from ._enqueue import write_jobs
from ._publish import DEFAULT_TIMEOUT, DEFAULT_WINDOW
from ._results import JOB_ID, RESULT_FIELDS, ResultSource, read_results, with_job_ids

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import ArrayType, MapType, StructType

    from .._core.view import AppView
    from .._enqueue.task import Task

T = TypeVar("T")

# Records read at once while checking which jobs had finished before the write.
_READS_AT_ONCE = 256
# The column of each job's message sequence, dropped from what map_dataframe returns.
_SEQ = "_jsw_seq"


def map_dataframe(
    df: DataFrame,
    task: Task[..., Any],
    *,
    key: str | Sequence[str],
    timeout: float = 600.0,
    run_id: str | None = None,
    args_column: str | None = None,
    result_schema: StructType | ArrayType | MapType | str | None = None,
    window: int = DEFAULT_WINDOW,
    publish_timeout: float = DEFAULT_TIMEOUT,
) -> DataFrame:
    """Run ``task`` on every row of ``df`` and return the rows' key columns with what each
    job came to: ``job_id``, ``state``, ``result`` (JSON text, or parsed to ``result_schema``),
    ``error``, ``attempts``, ``duration`` (seconds) and ``finished_at``.

    Rows become jobs as :func:`enqueue_dataframe` makes them (the same ids: ``key``,
    ``run_id``, ``args_column`` as there), so running it again within the stream's duplicate
    window makes no new job and returns the same results. It waits up to ``timeout``
    seconds for every job to finish; a row whose job failed says ``failed`` with its error,
    one not finished in time its state (``queued``, ``running``, ``retrying``), one whose
    record expired (``result_ttl``) ``unknown``: no row is left out. The task must keep its
    results (``store_result=True``) with the app's JSON serializer. This blocks; in async
    code call it through ``asyncio.to_thread``.
    """
    if not task.options.store_result:
        raise ConfigurationError(
            f"map_dataframe needs results: declare task {task.name} with store_result=True"
        )
    if task.app.serializer.content_type != "application/json":
        raise ConfigurationError("map_dataframe reads results as JSON: the app's serializer must be JSON")
    keys = [key] if isinstance(key, str) else list(key)
    if JOB_ID in keys:
        raise ConfigurationError(f"a key column may not be named {JOB_ID!r}: map_dataframe adds that column")
    app = task.app
    keyed = with_job_ids(df, app.name, task.name, keys, run_id).cache()
    try:
        wanted = {row[JOB_ID] for row in keyed.select(JOB_ID).toLocalIterator()}
        deadline = time.monotonic() + timeout
        # The records are heard on a loop of their own thread while this one writes the jobs:
        # Spark's calls stay in the caller's thread.
        with _LoopThread() as loop:
            listening = loop.run(_Listening.start(app, wanted))
            try:
                totals = write_jobs(
                    df, task, keys, run_id=run_id, args_column=args_column, window=window,
                    timeout=publish_timeout, receipts=True,
                )  # fmt: skip
                sequences = {job_id: seq for job_id, seq in totals["receipts"]}
                loop.run(listening.wait(sequences, deadline))
            finally:
                loop.run(listening.close())
        spark = df.sparkSession
        receipts = spark.createDataFrame(list(sequences.items()), f"{JOB_ID} string, {_SEQ} long")
        joined = keyed.join(receipts, JOB_ID, "left")
        results = read_results(joined, ResultSource.of(app), seq_column=_SEQ)
        results = results.select(*keys, JOB_ID, *(f.name for f in RESULT_FIELDS))
        if result_schema is not None:
            from pyspark.sql.functions import col, from_json

            results = results.withColumn("result", from_json(col("result"), result_schema))
        # Read now, while the ids are cached: the caller gets the results as they were.
        return results.localCheckpoint()
    finally:
        keyed.unpersist()


class _LoopThread:
    """An event loop running in a thread of its own for the block; :meth:`run` runs a
    coroutine there and waits for it."""

    def __enter__(self) -> _LoopThread:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="jsworker-spark-map", daemon=True)
        self.thread.start()
        return self

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro``'s result, run on the loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class _Finishing:
    """Which of the wanted jobs finished: records heard before the write said each job's
    sequence are kept, then matched."""

    def __init__(self, wanted: set[str]) -> None:
        self.wanted = wanted
        self.sequences: dict[str, int] = {}
        self.pending: set[str] = set()
        self.done = asyncio.Event()
        self._heard: dict[str, int] | None = {}

    def hear(self, job_id: str, seq: int) -> None:
        """A finished record of ``job_id``'s message at ``seq``."""
        if self._heard is not None:
            self._heard[job_id] = seq
        elif self.sequences.get(job_id) == seq:
            self.settle({job_id})

    def expect(self, sequences: dict[str, int]) -> None:
        """The sequence of each job's message, as the write found it."""
        heard, self._heard = self._heard or {}, None
        self.sequences = sequences
        self.pending = {job_id for job_id, seq in sequences.items() if heard.get(job_id) != seq}
        self.settle(set())

    def settle(self, finished: set[str]) -> None:
        """``finished`` have their record."""
        self.pending -= finished
        if not self.pending:
            self.done.set()


class _Listening:
    """The driver's subscription to the app's job records, and what it heard."""

    def __init__(self, conn: Connection, records: Records, finishing: _Finishing) -> None:
        self.conn, self.records, self.finishing = conn, records, finishing

    @classmethod
    async def start(cls, app: AppView, wanted: set[str]) -> _Listening:
        """Subscribed before the first job is written: no record of a new job comes before."""
        finishing = _Finishing(wanted)
        conn = await Connection.open(app.connect_options("producer", "spark-map"))

        async def on_record(subject: str, body: bytes) -> None:
            job_id = subject.rsplit(".", 1)[-1]
            if job_id in wanted and body:
                try:
                    record = JobRecord.decode(body)
                except SerializationError:
                    return  # not a record a worker wrote
                if record.state.finished:
                    finishing.hear(job_id, record.seq)

        await listen(conn, app.namespace.record_subject(), on_record)
        await conn.flush()
        return cls(conn, Records(conn, app.namespace), finishing)

    async def wait(self, sequences: dict[str, int], deadline: float) -> None:
        """Wait until the job of each message has finished, or until ``deadline``."""
        finishing = self.finishing
        finishing.expect(sequences)
        # Finished before the subscription (a duplicate of an earlier write): read once.
        await _read_finished(self.records, finishing)
        try:
            await asyncio.wait_for(finishing.done.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            # A record missed while the connection was down is in the bucket.
            await _read_finished(self.records, finishing)

    async def close(self) -> None:
        """Stop listening."""
        await self.conn.close()


async def _read_finished(records: Records, finishing: _Finishing) -> None:
    """Settle the pending jobs whose record in the bucket is a finished one of their own
    message."""
    left = sorted(finishing.pending)
    for start in range(0, len(left), _READS_AT_ONCE):
        chunk = left[start : start + _READS_AT_ONCE]
        found = await asyncio.gather(*(records.read(job_id) for job_id in chunk))
        finishing.settle(
            {
                job_id
                for job_id, entry in zip(chunk, found, strict=True)
                if entry is not None
                and entry[1].state.finished
                and entry[1].seq == finishing.sequences[job_id]
            }
        )
