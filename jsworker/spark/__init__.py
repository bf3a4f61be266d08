"""jsworker on Spark: enqueue DataFrames as jobs, read job events back as DataFrames.

Needs ``pip install 'jsworker[spark]'`` (pyspark 4, pyarrow) and Java 17+.

.. code-block:: python

    import jsworker.spark

    jsworker.spark.register(spark)  # the "jsworker" writer and the job-events reader
    (orders.write.format("jsworker").mode("append")
        .option("app", "shop").option("task", "charge").option("key", "order_id").save())

    report = jsworker.spark.enqueue_dataframe(orders, charge, key="order_id")
    print(report)  # charge: 50000 rows, 50000 created, 0 duplicates in 4.1s (12,195 rows/s)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._enqueue import EnqueueReport, enqueue_dataframe
from ._jobs import BadRowError, job_id
from ._schema import UnsupportedColumnError
from ._writer import JobsDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BadRowError",
    "EnqueueReport",
    "JobsDataSource",
    "UnsupportedColumnError",
    "enqueue_dataframe",
    "job_id",
    "register",
]


def register(spark: SparkSession) -> None:
    """Register jsworker's data sources with ``spark``: the ``jsworker`` writer
    (:class:`JobsDataSource`) and the job-events reader
    (:class:`~jsworker.spark._events_source.JobEventsDataSource`)."""
    from ._events_source import JobEventsDataSource

    spark.dataSource.register(JobsDataSource)
    spark.dataSource.register(JobEventsDataSource)
