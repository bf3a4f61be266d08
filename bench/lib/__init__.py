"""Shared pieces of the benchmark suite: records, statistics, processes, servers."""
