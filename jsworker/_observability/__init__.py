"""Logs and metrics. Imported by the runtime and the JetStream layer; imports neither."""
