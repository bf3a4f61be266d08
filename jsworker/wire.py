"""Header names of jsworker's messages: the wire format, in one place.

A job is a message on ``jsw.<app>.q.<queue>.<task>`` whose body is the serializer's encoding
of ``{"args": [...], "kwargs": {...}}``. A dead letter keeps the job's body and headers and
adds the ``Jsw-Dlq-*`` headers.
"""

MSG_ID = "Nats-Msg-Id"
"""The server's dedup key; the job id for jobs enqueued once."""

JOB_ID = "Jsw-Job-Id"
"""The job id when it differs from the dedup key (replayed jobs, dead letters)."""

TASK = "Jsw-Task"
ENQUEUED_AT = "Jsw-Enqueued-At"
"""Unix time in nanoseconds when the producer sent the job."""

CONTENT_TYPE = "Content-Type"

QUEUE = "Jsw-Queue"
ORIGINAL_SUBJECT = "Jsw-Original-Subject"
DLQ_REASON = "Jsw-Dlq-Reason"
DLQ_ATTEMPTS = "Jsw-Dlq-Attempts"
DLQ_AT = "Jsw-Dlq-At"
DLQ_ERROR_TYPE = "Jsw-Dlq-Error-Type"
DLQ_ERROR = "Jsw-Dlq-Error"
DLQ_TRACEBACK = "Jsw-Dlq-Traceback"
"""The traceback as a JSON string (headers cannot hold newlines)."""
BODY_TRUNCATED = "Jsw-Dlq-Body-Truncated"
"""Original body size, when the body had to be cut to fit the dead letter under max_payload."""
HEADERS_DROPPED = "Jsw-Dlq-Headers-Dropped"
"""Names of the job's own headers left out so that the dead letter's headers fit (64 KiB)."""
DLQ_PREFIX = "Jsw-Dlq-"
"""Headers with this prefix are written by the worker only; a job's own are dropped."""
