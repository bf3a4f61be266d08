"""One async façade over what the server keeps of an app: :class:`Admin` (and
:class:`DeadLetters`, the dead letters alone), with the types its answers come in.

::

    from jsworker.admin import Admin

    async with Admin(app) as admin:
        await admin.queues(); await admin.workers(); await admin.schedules()
        page = await admin.jobs(queue="default", state="queued", limit=50)
"""

from .._core.paging import Page
from .._core.queues import QueueStatus
from .._deadletters.admin import DeadLetters
from ._facade import Admin
from ._operations import JobResult
from ._search import Match, SearchResult
from ._summary import LISTED_STATES, JobPage, JobSummary, ListedState, RunningJobs

__all__ = [
    "LISTED_STATES",
    "Admin",
    "DeadLetters",
    "JobPage",
    "JobResult",
    "JobSummary",
    "ListedState",
    "Match",
    "Page",
    "QueueStatus",
    "RunningJobs",
    "SearchResult",
]
