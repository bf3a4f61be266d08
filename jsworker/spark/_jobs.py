"""Rows to jobs: stable job ids and message bodies, with no Spark involved.

A row's job id is derived from what identifies the work (app, task, key values and an
optional run id), never from row order or a random number, so writing the same rows again
publishes the same ids and the server's dedup drops the repeats.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._core.serializers import JSONSerializer, encode_call
from .._errors import BadRowError as BadRowError
from .._errors import SerializationError
from .._wire.headers import CONTENT_TYPE, ENQUEUED_AT, MSG_ID, TASK
from .._wire.names import Namespace, partition_of

ID_LENGTH = 32
"""Hex characters of a job id (128 bits of sha256)."""

Converter = Callable[[Any], Any]
"""Turns a column's value (as Arrow hands it to Python) into a JSON-ready value."""


def _canonical(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True, allow_nan=False)


def job_id(app: str, task: str, key: Sequence[Any], run_id: str | None = None) -> str:
    """The job id of the row whose key columns hold ``key``, for ``task`` of ``app``.

    It is the sha256 of the compact JSON array ``[app, task, [key values...]]`` (with
    ``run_id`` appended when given), as hex cut to 32 characters. JSON keeps the parts apart
    (``("a", "bc")`` and ``("ab", "c")`` differ) and is the same in every process, unlike
    Python's salted ``hash()``. Key values are the JSON forms the writer sends (dates as ISO
    strings, decimals as strings). App names are case-insensitive, as everywhere in jsworker.
    """
    doc: list[Any] = [Namespace(app).app, task, list(key)]
    if run_id is not None:
        doc.append(run_id)
    return hashlib.sha256(_canonical(doc).encode()).hexdigest()[:ID_LENGTH]


class RowEncoder:
    """Builds the job messages of one partition's rows for one task.

    ``columns`` are the row's column names in order and ``converters`` (by column, None for
    values that pass as they are) make their values JSON-ready. Without ``args_column`` every
    column becomes a keyword argument; with it, that column alone holds the arguments: a dict
    (a struct) becomes keyword arguments, a list (an array) positional ones. ``where`` names
    the partition in error messages.
    """

    def __init__(
        self,
        *,
        app: str,
        queue: str,
        task: str,
        columns: Sequence[str],
        key: Sequence[str],
        converters: Mapping[str, Converter | None],
        args_column: str | None = None,
        run_id: str | None = None,
        where: str = "",
        partitions: int = 1,
    ) -> None:
        self._namespace = Namespace(app)
        self._partitions = partitions
        self._queue = queue
        self._app = self._namespace.app
        self._task = task
        self._run_id = run_id
        self._columns = list(columns)
        self._key = list(key)
        self._key_at = [self._columns.index(k) for k in key]
        self._args_at = None if args_column is None else self._columns.index(args_column)
        self._args_column = args_column
        self._converters = [converters.get(c) for c in self._columns]
        self._where = where
        self._serializer = JSONSerializer()

    def convert(self, columns: Sequence[list[Any]]) -> list[list[Any]]:
        """Apply the converters to whole columns (lists of one batch's values, schema order)."""
        return [
            values if conv is None else [conv(v) for v in values]
            for conv, values in zip(self._converters, columns, strict=True)
        ]

    def subject(self, job_id: str) -> str:
        """The subject of job ``job_id``."""
        partition = partition_of(job_id, self._partitions)
        return self._namespace.job_subject(self._queue, self._task, job_id, partition)

    def job_id(self, row: Sequence[Any], position: int) -> str:
        """The job id of converted ``row``, the ``position``-th of its partition."""
        key = [row[i] for i in self._key_at]
        if None in key:
            column = self._key[key.index(None)]
            raise BadRowError(f"key column {column!r} is null in row {position}{self._where}")
        try:
            return job_id(self._app, self._task, key, self._run_id)
        except (TypeError, ValueError) as exc:
            labels = [f"key column {name!r}" for name in self._key]
            raise BadRowError(self._culprit(key, labels, position, exc)) from exc

    def encode(self, row: Sequence[Any], position: int) -> tuple[bytes, dict[str, str]]:
        """Body and headers of the job for converted ``row``, the ``position``-th of its partition."""
        ident = self.job_id(row, position)
        args: Sequence[Any] = ()
        if self._args_at is None:
            kwargs: dict[str, Any] = dict(zip(self._columns, row, strict=True))
        else:
            packed = row[self._args_at]
            if packed is None:
                raise BadRowError(f"args column {self._args_column!r} is null in row {position}{self._where}")
            kwargs = packed if isinstance(packed, dict) else {}
            args = () if isinstance(packed, dict) else packed
        try:
            body = encode_call(self._serializer, tuple(args), kwargs)
        except SerializationError as exc:
            values = list(kwargs.values()) if kwargs else list(args)
            raise BadRowError(self._culprit(values, self._labels(kwargs, args), position, exc)) from exc
        headers = {
            MSG_ID: ident,
            TASK: self._task,
            ENQUEUED_AT: str(time.time_ns()),
            CONTENT_TYPE: self._serializer.content_type,
        }
        return body, headers

    def _culprit(self, values: list[Any], labels: list[str], position: int, exc: Exception) -> str:
        """Name the first value JSON refuses; only runs once a row has failed."""
        for value, label in zip(values, labels, strict=True):
            try:
                _canonical(value)
            except (TypeError, ValueError) as bad:
                return f"{label} in row {position}{self._where} cannot be sent as JSON: {bad}"
        return f"row {position}{self._where} cannot be sent as JSON: {exc}"

    def _labels(self, kwargs: dict[str, Any], args: Sequence[Any]) -> list[str]:
        if self._args_column is None:
            return [f"column {name!r}" for name in kwargs]
        if kwargs:
            return [f"field {name!r} of column {self._args_column!r}" for name in kwargs]
        return [f"argument {i} in column {self._args_column!r}" for i in range(len(args))]
