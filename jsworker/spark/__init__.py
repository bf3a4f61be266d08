"""jsworker on Spark: enqueue DataFrames as jobs, get their results back joined to the rows,
read job events back as DataFrames.

Needs ``pip install 'jsworker[spark]'`` (pyspark 4.2+, pyarrow) and Java 17+.

.. code-block:: python

    import jsworker.spark

    jsworker.spark.register(spark)  # the "jsworker" writer and the job-events reader
    (orders.write.format("jsworker").mode("append")
        .option("app", "shop").option("task", "charge").option("key", "order_id").save())

    report = jsworker.spark.enqueue_dataframe(orders, charge, key="order_id")
    print(report)  # charge: 50000 rows, 50000 created, 0 duplicates in 4.1s (12,195 rows/s)

    scored = jsworker.spark.map_dataframe(orders, score, key="order_id", timeout=600)
    scored.write.parquet("scores/")  # order_id, job_id, state, result, error, attempts, ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._enqueue import EnqueueReport, enqueue_dataframe
from ._jobs import BadRowError, job_id
from ._map import map_dataframe
from ._results import ResultSource, read_results, with_job_ids
from ._schema import UnsupportedColumnError
from ._writer import JobsDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BadRowError",
    "EnqueueReport",
    "JobsDataSource",
    "ResultSource",
    "UnsupportedColumnError",
    "enqueue_dataframe",
    "job_id",
    "map_dataframe",
    "read_results",
    "register",
    "with_job_ids",
]


def register(spark: SparkSession) -> None:
    """Register jsworker's data sources with ``spark``: the ``jsworker`` writer
    (:class:`JobsDataSource`) and the job-events reader
    (:class:`~jsworker.spark._events_source.JobEventsDataSource`)."""
    from ._events_source import JobEventsDataSource

    spark.dataSource.register(JobsDataSource)
    spark.dataSource.register(JobEventsDataSource)
