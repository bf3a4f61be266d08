"""Per-task figures from job events: outcomes, rates, run times, queue waits, throughput.

The input is any DataFrame with the event columns (:data:`jsworker.events._rows.SPARK_SCHEMA`):
the Parquet export read back (``spark.read.parquet(dir)``, the cheap way to analyse often) or
the ``jsworker-events`` source. Events are observations published without acknowledgement, so
in a rare connection loss a few may be missing; the figures describe the events present.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

#: Relative error of the percentiles is 1 / ACCURACY; each is a value seen in the data.
ACCURACY = 10_000
_QUANTILES = [0.5, 0.95, 0.99]


def job_report(events: DataFrame) -> DataFrame:
    """One row per task (sorted by task) with these columns:

    - ``jobs``: distinct job ids with any event of the task in ``events``;
    - ``runs``: ``started`` events (each attempt that began to run);
    - ``succeeded``, ``failed``, ``retried``, ``dead_lettered``: events of that kind;
      ``failed`` counts failed *runs*, the ones that were retried afterwards included;
    - ``failure_rate``: failed / runs (null without runs);
    - ``retry_rate``: jobs with at least one ``retried`` event / jobs;
    - ``dead_letter_rate``: dead_lettered / jobs (a job never started, such as one with an
      unknown task or a bad body, is dead-lettered without a run);
    - ``run_p50``, ``run_p95``, ``run_p99``: ``duration`` of ``succeeded`` and ``failed``
      events, in seconds;
    - ``wait_p50``, ``wait_p95``, ``wait_p99``: ``queue_wait`` of ``started`` events of first
      attempts (enqueue to first start; retries wait out their backoff, which is no queueing);
    - ``succeeded_per_minute_avg`` and ``_max``: ``succeeded`` events per calendar minute
      (UTC, by ``ts``), over the minutes in which the task had at least one.

    Percentiles are approximate (``percentile_approx``, relative error 1/:data:`ACCURACY`),
    null when there is nothing to measure.
    """
    kind = F.col("event")
    per_task = events.groupBy("task").agg(
        F.countDistinct("job_id").alias("jobs"),
        _count(kind == "started").alias("runs"),
        _count(kind == "succeeded").alias("succeeded"),
        _count(kind == "failed").alias("failed"),
        _count(kind == "retried").alias("retried"),
        _count(kind == "dead_lettered").alias("dead_lettered"),
        F.countDistinct(F.when(kind == "retried", F.col("job_id"))).alias("_retried_jobs"),
        F.percentile_approx(
            F.when(kind.isin("succeeded", "failed"), F.col("duration")), _QUANTILES, ACCURACY
        ).alias("_run"),
        F.percentile_approx(
            F.when((kind == "started") & (F.col("attempt") == 1), F.col("queue_wait")), _QUANTILES, ACCURACY
        ).alias("_wait"),
    )
    per_minute = (
        events.where(kind == "succeeded")
        .groupBy("task", F.date_trunc("minute", "ts").alias("minute"))
        .count()
        .groupBy("task")
        .agg(
            F.avg("count").alias("succeeded_per_minute_avg"),
            F.max("count").alias("succeeded_per_minute_max"),
        )
    )
    report = per_task.join(per_minute, "task", "left")
    return report.select(
        "task",
        "jobs",
        "runs",
        "succeeded",
        "failed",
        "retried",
        "dead_lettered",
        _ratio("failed", "runs").alias("failure_rate"),
        _ratio("_retried_jobs", "jobs").alias("retry_rate"),
        _ratio("dead_lettered", "jobs").alias("dead_letter_rate"),
        *(F.col("_run")[i].alias(f"run_p{round(q * 100)}") for i, q in enumerate(_QUANTILES)),
        *(F.col("_wait")[i].alias(f"wait_p{round(q * 100)}") for i, q in enumerate(_QUANTILES)),
        "succeeded_per_minute_avg",
        F.coalesce(F.col("succeeded_per_minute_max"), F.lit(0)).alias("succeeded_per_minute_max"),
    ).orderBy("task")


def _count(condition: Column) -> Column:
    return F.count(F.when(condition, True))


def _ratio(part: str, whole: str) -> Column:
    return F.when(F.col(whole) > 0, F.col(part) / F.col(whole))


def format_report(report: DataFrame | list[Any]) -> str:
    """:func:`job_report` (the DataFrame, or its collected rows) as an aligned text table.

    Rates in percent, times in ms/s/min, percentiles as ``p50/p95/p99``, throughput as
    ``average/max`` successes per active minute.
    """
    rows = report.collect() if isinstance(report, DataFrame) else report
    header = (
        *("TASK", "JOBS", "RUNS", "OK", "FAILED", "RETRIED", "DEAD", "FAIL%", "RETRY%", "DEAD%"),
        *("RUN p50/p95/p99", "WAIT p50/p95/p99", "OK/MIN avg/max"),
    )
    lines = [
        (
            r["task"],
            *(str(r[c]) for c in ("jobs", "runs", "succeeded", "failed", "retried", "dead_lettered")),
            *(_percent(r[c]) for c in ("failure_rate", "retry_rate", "dead_letter_rate")),
            "/".join(_duration(r[f"run_p{p}"]) for p in (50, 95, 99)),
            "/".join(_duration(r[f"wait_p{p}"]) for p in (50, 95, 99)),
            f"{_number(r['succeeded_per_minute_avg'])}/{r['succeeded_per_minute_max']}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]

    def render(cells: tuple[str, ...]) -> str:
        # Task names left-aligned, figures right-aligned so their digits line up.
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([cells[0].ljust(widths[0]), *rest]).rstrip()

    if not lines:
        return "(no job events)"
    return "\n".join([render(header), *(render(line) for line in lines)])


def print_report(report: DataFrame | list[Any]) -> None:
    """Print :func:`format_report` of ``report``."""
    print(format_report(report))  # noqa: T201 - printing is what it is for


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0.001:
        return f"{seconds * 1_000_000:.0f}us"
    if seconds < 1:
        return f"{seconds * 1000:.3g}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    return f"{seconds / 60:.3g}min"
