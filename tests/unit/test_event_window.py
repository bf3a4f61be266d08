"""Counted job events as chart series: merging a count with the next one, and rates per bucket."""

from __future__ import annotations

from jsworker.events._window import EventCounts


def test_rates_are_per_second_per_bucket_the_last_one_still_filling() -> None:
    counts = EventCounts(
        30.0, since=900.0, until=1000.0, last_seq=9, counts={("q", "started"): {30: 60, 33: 5}}
    )
    # Buckets 30, 31, 32 are whole (30 s each); 33 began at 990, 10 s before ``until``.
    assert counts.rates("q", "started") == [2.0, 0.0, 0.0, 0.5]
    assert counts.rates("q", "dead_lettered") == [0.0, 0.0, 0.0, 0.0]
    assert counts.rates("other", "started", now=1050.0) == [0.0] * 6
    assert counts.queues() == ["q"]


def test_a_merge_adds_the_newer_counts_and_forgets_buckets_that_left_the_window() -> None:
    older = EventCounts(
        10.0, since=0.0, until=95.0, last_seq=5, counts={("q", "started"): {0: 1, 9: 2}}, reads=3
    )
    newer = EventCounts(
        10.0, since=5.0, until=105.0, last_seq=8, counts={("q", "started"): {9: 1, 10: 4}}, reads=5
    )
    merged = older.merged(newer, window=100.0)
    assert (merged.since, merged.until, merged.last_seq, merged.reads) == (0.0, 105.0, 8, 8)
    assert merged.counts == {("q", "started"): {0: 1, 9: 3, 10: 4}}
    later = merged.merged(EventCounts(10.0, 0.0, 125.0, 8), window=100.0)
    # Bucket 0 ended before the window of the last 100 seconds began (at 25 -> bucket 2).
    assert later.since == 20.0 and later.counts == {("q", "started"): {9: 3, 10: 4}}


def test_a_cut_read_replaces_what_came_before() -> None:
    older = EventCounts(10.0, since=0.0, until=95.0, last_seq=5, counts={("q", "started"): {0: 1}})
    cut = EventCounts(10.0, since=80.0, until=99.0, last_seq=500, counts={("q", "started"): {9: 7}}, cut=True)
    assert older.merged(cut) is cut
