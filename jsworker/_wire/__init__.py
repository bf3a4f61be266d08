"""The wire format: the names jsworker gives things on the server (``names``: streams,
subjects, consumers, buckets, roles) and the headers of its messages (``headers``)."""
