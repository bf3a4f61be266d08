"""How the dashboard's pages write values: times (in ``<time>`` elements the page's script
shows in the viewer's zone), ages, durations, counts and sizes; the templates' filters."""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup

from .._core.queues import format_age
from .._wire.headers import ENQUEUED_AT, SCHEDULED_FOR


def age(seconds: float | None) -> str:
    """Seconds as an age: ``45s``, ``3m12s``, ``2h``."""
    return format_age(seconds)


def when(moment: datetime | float | None) -> str:
    """A time in UTC, in a ``<time>`` element the page's script shows in the viewer's own
    zone, with how long ago (or how soon) it is."""
    if moment is None:
        return "-"
    if isinstance(moment, int | float):
        moment = datetime.fromtimestamp(moment, UTC)
    utc = moment.astimezone(UTC)
    text = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    return Markup('<time datetime="{}">{}</time>').format(utc.isoformat(), text)


# Headers holding a unix time, and its unit (in seconds): shown as the time they stand for.
_TIME_HEADERS = {ENQUEUED_AT: 1e-9, SCHEDULED_FOR: 1e-3}


def header(value: str, name: str) -> str:
    """A header's value, with the time it stands for when it is one (``Jsw-Enqueued-At``
    is nanoseconds since 1970, which nobody reads)."""
    unit = _TIME_HEADERS.get(name)
    if unit is None or not (value.isascii() and value.isdigit()):
        return value
    return Markup("{} · {}").format(value, when(int(value) * unit))


def moment(seconds: float | None) -> str:
    """A time to the millisecond (a timeline's events come milliseconds apart)."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def duration(seconds: float | None) -> str:
    """A duration as people read it: ``850 µs``, ``12.3 ms``, ``4.56 s``, or an age above a minute."""
    if seconds is None:
        return "-"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    return format_age(seconds)


def number(value: int | None) -> str:
    """A count with thousands separated."""
    return "-" if value is None else f"{value:,}"


def size(value: int | None) -> str:
    """Bytes in B, KiB, MiB or GiB."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"
