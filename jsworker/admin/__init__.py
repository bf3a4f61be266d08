"""One async façade over what the server keeps of an app: :class:`Admin`.

::

    from jsworker.admin import Admin

    async with Admin(app) as admin:
        await admin.queues(); await admin.workers(); await admin.schedules()
        page = await admin.jobs(queue="default", state="queued", limit=50)
"""

from ..paging import Page
from .facade import Admin
from .operations import JobResult
from .summary import LISTED_STATES, JobPage, JobSummary, ListedState, RunningJobs

__all__ = [
    "LISTED_STATES",
    "Admin",
    "JobPage",
    "JobResult",
    "JobSummary",
    "ListedState",
    "Page",
    "RunningJobs",
]
