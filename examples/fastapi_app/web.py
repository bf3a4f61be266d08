"""A FastAPI app that enqueues jobs from its endpoints and waits for their results.

    uvicorn web:api          # the web app
    jsworker run tasks       # a worker, in another terminal

The jsworker app is closed in the lifespan: its connection to NATS (one per event loop, opened
on the first enqueue) ends with the web app, not when the process is collected.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from tasks import app as jobs
from tasks import thumbnail

from jsworker import JobNotFound, JobState


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    yield
    await jobs.aclose()


api = FastAPI(lifespan=lifespan)


class Thumbnail(BaseModel):
    path: str
    width: int = 256


@api.post("/thumbnails", status_code=202)
async def make_thumbnail(request: Thumbnail) -> dict[str, str]:
    """Enqueue and answer at once with the job's id."""
    job = await thumbnail.adelay(request.path, request.width)
    return {"job_id": job.id}


@api.get("/thumbnails/{job_id}")
async def thumbnail_state(job_id: str) -> dict[str, str]:
    """Where the job is now: queued, running, succeeded, ... (404 for an id never seen)."""
    status = await jobs.astatus(job_id)
    if status.state is JobState.UNKNOWN:
        raise HTTPException(404, "no such job")
    return {"job_id": job_id, "state": status.state.value}


@api.get("/thumbnails/{job_id}/result")
async def thumbnail_result(job_id: str, wait: float = 10.0) -> dict[str, str]:
    """The job's result, waiting up to ``wait`` seconds for it (504 when it is not there yet)."""
    try:
        made = await jobs.job(job_id).aresult(timeout=wait)
    except JobNotFound:
        raise HTTPException(404, "no such job") from None
    except TimeoutError:
        raise HTTPException(504, "not finished yet") from None
    return {"job_id": job_id, "thumbnail": made}
