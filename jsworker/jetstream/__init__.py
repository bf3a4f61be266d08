"""The JetStream layer: the only part of jsworker that talks to NATS.

Above this package everything speaks seconds and jsworker's own errors; nanoseconds, NATS
error classes and raw API JSON stay in here.
"""
