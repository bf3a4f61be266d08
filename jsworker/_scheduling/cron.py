"""Schedule expressions as nats-server understands them, checked before anything is sent.

The server fires cron schedules with six fields (seconds first) and reads ``@every`` as a Go
duration. People write five-field cron (minute first) and think of intervals as
``timedelta``: this module takes both forms, refuses what the server would refuse (a bad
expression is otherwise stored and silently never fires), and computes fire times the way the
server does, for ``jsworker schedules list`` and for naming the job of each tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .._config import check_seconds
from .._errors import ConfigurationError

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def as_written(expression: str) -> str:
    """``expression`` as people write it: a six-field cron whose seconds field is ``0`` (what
    a five-field declaration becomes on the server) in its five fields, anything else as it is."""
    fields = expression.split()
    if len(fields) == 6 and fields[0] == "0":
        return " ".join(fields[1:])
    return expression


# (name, low, high, names) of the six fields, seconds first.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(_MONTHS, start=1)}),
    ("day of week", 0, 6, {d: i for i, d in enumerate(_WEEKDAYS)}),
)
_PREDEFINED = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
# The server gives up looking for a fire time after five years; so does this module.
_YEARS = 5


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression: ``expression`` as the server gets it (six fields), the sets of values
    each field allows, and whether day of month and day of week were both restricted (then
    either matching is enough, as in every cron)."""

    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    either_day: bool

    @classmethod
    def parse(cls, text: str) -> Cron:
        """A cron of 5 fields (minute first), 6 (seconds first) or ``@hourly`` and friends;
        :class:`ConfigurationError` naming the fault otherwise."""
        if not isinstance(text, str):
            raise ConfigurationError(f"cron must be a string, not {text!r:.100}")
        expression = _PREDEFINED.get(text.strip().lower(), text)
        fields = expression.split()
        if len(fields) == 5:
            fields = ["0", *fields]
        if len(fields) != 6:
            raise ConfigurationError(
                f"invalid cron {quoted(text)}: use 5 fields (minute hour day month weekday), 6 (seconds "
                "first) or one of " + ", ".join(_PREDEFINED)
            )
        sets: list[frozenset[int]] = []
        stars: list[bool] = []
        for value, (name, low, high, names) in zip(fields, _FIELDS, strict=True):
            allowed, star = _field(text, value, name, low, high, names)
            sets.append(allowed)
            stars.append(star)
        seconds, minutes, hours, days, months, weekdays = sets
        return cls(
            " ".join(fields), seconds, minutes, hours, days, months, weekdays, not (stars[3] or stars[5])
        )

    def _day_matches(self, when: datetime) -> bool:
        day = when.day in self.days
        weekday = (when.isoweekday() % 7) in self.weekdays
        return (day or weekday) if self.either_day else (day and weekday)

    def next_after(self, after: datetime, zone: ZoneInfo | None = None) -> datetime | None:
        """The first fire time strictly after ``after`` (aware), in ``zone`` (UTC when None),
        returned in UTC; None when there is none within five years."""
        zone = zone or ZoneInfo("UTC")
        local = after.astimezone(zone).replace(microsecond=0, tzinfo=None) + timedelta(seconds=1)
        limit = local.year + _YEARS
        day = local.date()
        first = True
        while day.year <= limit:
            if day.month in self.months and self._day_matches(datetime(day.year, day.month, day.day)):
                start = (local.hour, local.minute, local.second) if first else (0, 0, 0)
                for hour in sorted(h for h in self.hours if h >= start[0]):
                    for minute in sorted(self.minutes):
                        for second in sorted(self.seconds):
                            if (hour, minute, second) >= start:
                                wall = datetime(day.year, day.month, day.day, hour, minute, second)
                                return wall.replace(tzinfo=zone).astimezone(UTC)
            day += timedelta(days=1)
            first = False
        return None

    def previous_before(self, before: datetime, zone: ZoneInfo | None = None) -> datetime | None:
        """The last fire time strictly before ``before`` (aware), in UTC; None when there is
        none within five years."""
        zone = zone or ZoneInfo("UTC")
        local = before.astimezone(zone).replace(tzinfo=None)
        if local.microsecond:
            local = local.replace(microsecond=0) + timedelta(seconds=1)
        limit = local.year - _YEARS
        day = local.date()
        first = True
        while day.year >= limit:
            if day.month in self.months and self._day_matches(datetime(day.year, day.month, day.day)):
                end = (local.hour, local.minute, local.second) if first else (24, 0, 0)
                for hour in sorted((h for h in self.hours if h <= end[0]), reverse=True):
                    for minute in sorted(self.minutes, reverse=True):
                        for second in sorted(self.seconds, reverse=True):
                            if (hour, minute, second) < end:
                                wall = datetime(day.year, day.month, day.day, hour, minute, second)
                                return wall.replace(tzinfo=zone).astimezone(UTC)
            day -= timedelta(days=1)
            first = False
        return None


def _field(
    text: str, value: str, name: str, low: int, high: int, names: dict[str, int]
) -> tuple[frozenset[int], bool]:
    """The values one field allows, and whether it is unrestricted (``*`` or ``?``)."""
    allowed: set[int] = set()
    star = False
    # One error for the whole field, made once: a field may list thousands of values.
    bad = ConfigurationError(f"invalid cron {quoted(text)}: {name} field {quoted(value)} ({low}-{high})")
    for part in value.split(","):
        span, slash, step_text = part.partition("/")
        # Read like the values: "*/" (no step) and "*/1_0" are refused, as by the server.
        step = _number(step_text, {}, bad) if slash else 1
        if step < 1 or part.count("/") > 1:
            raise bad
        if span in ("*", "?"):
            start, end = low, high
            star = star or step == 1
        else:
            first, dash, last = span.partition("-")
            start = _number(first, names, bad)
            end = _number(last, names, bad) if dash else (high if step_text else start)
        if not low <= start <= end <= high:
            raise bad
        allowed.update(range(start, end + 1, step))
    return frozenset(allowed), star


def quoted(text: str, limit: int = 100) -> str:
    """``text`` quoted for a message, cut after ``limit`` characters (marked ``...``): an
    expression may be tens of kilobytes."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}..."


def _number(token: str, names: dict[str, int], bad: ConfigurationError) -> int:
    if token.lower() in names:
        return names[token.lower()]
    # ASCII digits, as the server's strconv.Atoi reads: str.isdigit also takes "²" (which
    # int() refuses) and other scripts' digits. Longer ones are out of every field's range
    # anyway, and int() refuses over 4300 digits.
    if not (token.isascii() and token.isdigit()) or len(token) > 9:
        raise bad
    return int(token)


#: The longest ``@every`` the server takes, in seconds: it reads the interval as a Go
#: ``time.Duration`` (int64 nanoseconds, about 292 years), here to the whole millisecond
#: :func:`go_duration` writes. One millisecond more is refused as an invalid pattern.
MAX_EVERY = 9_223_372_036.854


def every_seconds(every: timedelta | float | int) -> float:
    """An interval in seconds: a ``timedelta`` or a number, from 1 second (the server's
    minimum) to :data:`MAX_EVERY` (the longest Go duration); ConfigurationError otherwise."""
    bad = ConfigurationError(
        f"every must be at least 1 second and at most {MAX_EVERY} seconds (about 292 years, the "
        f"longest interval the server's @every takes), not {every!r}"
    )
    try:
        seconds = check_seconds("every", every.total_seconds() if isinstance(every, timedelta) else every)
    except ConfigurationError:
        raise bad from None
    # Bounded as written for the server, to the millisecond: 0.9996 is sent as "1s".
    if not 1 <= round(seconds * 1000) / 1000 <= MAX_EVERY:
        raise bad
    return seconds


def go_duration(seconds: float) -> str:
    """``seconds`` written as a Go duration (what ``@every`` takes), to the millisecond."""
    millis = round(seconds * 1000)
    whole, rest = divmod(millis, 1000)
    return f"{whole}s" if not rest else f"{whole}s{rest}ms"


def duration_seconds(duration: str) -> float:
    """Seconds of a Go duration as :func:`go_duration` writes them (``90s``, ``1s500ms``);
    ValueError for anything else."""
    seconds, _, rest = duration.partition("s")
    millis = rest[:-2] if rest.endswith("ms") else ""
    if rest and not millis:
        raise ValueError(duration)
    return float(seconds) + (int(millis) / 1000 if millis else 0.0)


def zone(name: str | None) -> ZoneInfo | None:
    """The IANA time zone ``name`` (None stays None); ConfigurationError for an unknown one."""
    if name is None:
        return None
    try:
        # Names the server's Go time.LoadLocation refuses too: relative paths, "..", absolute.
        if not isinstance(name, str) or not name or name.startswith(("/", ".", "\\")) or ".." in name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigurationError(
            f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin'"
        ) from None


# Zone names that mean "the local time of the machine that reads them": Go's "Local", and the
# "localtime" entry many zoneinfo directories carry (a link to /etc/localtime). The server
# accepts both, and then fires in whatever zone its host is set to.
_HOST_ZONES = frozenset({"local", "localtime"})


def check_zone(name: str | None) -> ZoneInfo | None:
    """The zone a schedule may be declared in: :func:`zone`, and ConfigurationError for a name
    that means the server host's local time (``Local``, ``localtime``), which would make the
    schedule fire in whatever zone that machine happens to be set to."""
    if isinstance(name, str) and name.rsplit("/", 1)[-1].casefold() in _HOST_ZONES:
        raise ConfigurationError(
            f"time zone {name!r} means the local time of the server's host (whatever zone the "
            "nats-server machine is set to), not a fixed zone: use an IANA name such as "
            "'Europe/Berlin', or leave tz out for UTC"
        )
    return zone(name)
