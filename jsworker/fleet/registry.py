"""The worker registry, by the name the command line and the Admin API import it under: it
lives in :mod:`jsworker.workers`, under the queue status that counts live workers per queue."""

from ..workers import ENTRY_TTL as ENTRY_TTL
from ..workers import REFRESH_INTERVAL as REFRESH_INTERVAL
from ..workers import REGISTRY_SINCE as REGISTRY_SINCE
from ..workers import REMOVED as REMOVED
from ..workers import WorkerEntry as WorkerEntry
from ..workers import live_workers as live_workers
from ..workers import workers_bucket_spec as workers_bucket_spec
