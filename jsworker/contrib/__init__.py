"""Optional integrations with other libraries, each in a module of its own that imports its
library: nothing here is imported by jsworker itself, so an app pays for one only when it
imports it (``from jsworker.contrib.otel import TracingMiddleware``)."""
