"""Processes the benchmark runs: the jsworker bench app and the raw nats-py consumer."""
