"""Workflows: chains, groups and chords whose steps are enqueued exactly once, advanced by the
workers as each step ends (no waiting task, no polling process).

``chain(a.s(1), b.s(), c.s())``: each step after the one before it succeeded, with its result
first in its arguments; ``group(resize.s(p) for p in paths)``: members run together, all
enqueued or none; ``chord(group, zip_all.s())``: the callback once every member ended, with
their results in order. See :mod:`.advance` for how exactly-once is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._enqueue.task import Signature
from .._errors import ConfigurationError
from ._definition import FlowDef, OnFailure
from ._handle import Workflow, WorkflowStatus
from ._start import describe_all, group_flow, new_flow_id, start

if TYPE_CHECKING:
    from .._enqueue.task import TaskOwner

__all__ = [
    "Batch",
    "Chain",
    "Chord",
    "Group",
    "Signature",
    "Workflow",
    "WorkflowStatus",
    "batch",
    "chain",
    "chord",
    "group",
]


def _app_of(sigs: Iterable[Signature]) -> TaskOwner:
    apps = {id(s.task.app): s.task.app for s in sigs if isinstance(s, Signature)}
    if len(apps) != 1:
        raise ConfigurationError("a workflow's signatures must all be tasks of one app")
    return next(iter(apps.values()))


def _check_members(members: list[Signature]) -> None:
    """TypeError for a member whose arguments do not fit its task, before anything is sent
    (checked only: a member's job is made, and the app's middleware told of it, when the
    workflow starts)."""
    for sig in members:
        sig.task.check_arguments(sig.args, sig.kwargs)


class _Startable:
    """Something that starts as a workflow: ``apply`` / ``aapply`` return its handle."""

    def _flow(self) -> tuple[TaskOwner, FlowDef, dict[str, dict[str, Any]]]:
        raise NotImplementedError

    async def aapply(self, **options: Any) -> Workflow:
        """Start it: its definition and first jobs are stored all or none. It takes no
        options (``countdown``...): a workflow starts when it is applied."""
        self._no_options("aapply", options)
        return await _started(*self._flow())

    def apply(self, **options: Any) -> Workflow:
        """Sync form of :meth:`aapply`."""
        self._no_options("apply", options)
        app, flow, first = self._flow()
        return app.bridge.run_sync(_started, app, flow, first)

    def delay(self) -> Workflow:
        """Celery's spelling of :meth:`apply` (a member's own arguments are in its signature)."""
        return self.apply()

    def apply_async(self, **options: Any) -> Workflow:
        """Celery's spelling of :meth:`apply`."""
        self._no_options("apply_async", options)
        return self.apply()

    def _no_options(self, spelling: str, options: dict[str, Any]) -> None:
        if options:
            kind = type(self).__name__.lower()
            raise ConfigurationError(
                f"{kind}.{spelling}() takes no {', '.join(sorted(options))}: a workflow starts when it "
                "is applied; to start one later, apply it from a delayed job of a task of your own "
                "(docs/workflows.md)"
            )


async def _started(app: TaskOwner, flow: FlowDef, first: dict[str, dict[str, Any]]) -> Workflow:
    """Store ``flow`` with its ``first`` steps' jobs; its handle."""
    await start(app, flow, first)
    return Workflow(app, flow.id)


class Chain(_Startable):
    """Steps run one after the other (see :func:`chain`)."""

    def __init__(self, steps: list[Signature], on_error: Signature | None, flow_id: str | None) -> None:
        self.steps, self.on_error, self.id = steps, on_error, new_flow_id(flow_id)

    def _flow(self) -> tuple[TaskOwner, FlowDef, dict[str, dict[str, Any]]]:
        described = describe_all(self.steps, "chain")
        if not self.steps[0].immutable and self.steps[0].task is not None:
            # The first step takes no previous result: its arguments must be whole now.
            self.steps[0].task.check_arguments(self.steps[0].args, self.steps[0].kwargs)
        error = self.on_error.describe(after_result=True, errback=True) if self.on_error is not None else None
        flow = FlowDef(self.id, "chain", described, None, error)
        return _app_of(self.steps), flow, {"0": described[0]}


class Group(_Startable):
    """Members run together (see :func:`group`)."""

    def __init__(self, members: list[Signature], on_failure: OnFailure, flow_id: str | None) -> None:
        self.members, self.on_failure, self.flow_id = members, on_failure, flow_id
        self.id = new_flow_id(flow_id)

    def _flow(self) -> tuple[TaskOwner, FlowDef, dict[str, dict[str, Any]]]:
        flow = group_flow(self.id, self.members, None, None, self.on_failure)
        _check_members(self.members)
        return _app_of(self.members), flow, {f"m{i}": d for i, d in enumerate(flow.steps)}


class Chord(_Startable):
    """A group whose callback runs once every member ended (see :func:`chord`)."""

    def __init__(self, members: Group, callback: Signature, on_error: Signature | None) -> None:
        self.members, self.callback, self.error = members, callback, on_error

    def on_error(self, sig: Signature) -> Chord:
        """This chord with ``sig`` run (once) when it fails, with the failure's details."""
        return Chord(self.members, self.callback, sig)

    def _flow(self) -> tuple[TaskOwner, FlowDef, dict[str, dict[str, Any]]]:
        g = self.members
        flow = group_flow(g.id, g.members, self.callback, self.error, g.on_failure)
        _check_members(g.members)
        return _app_of([*g.members, self.callback]), flow, {f"m{i}": d for i, d in enumerate(flow.steps)}


class Batch(_Startable):
    """A group with callbacks on completion and on success (see :func:`batch`)."""

    def __init__(
        self,
        members: list[Signature],
        on_complete: Signature | None,
        on_success: Signature | None,
        flow_id: str | None,
    ) -> None:
        self.members, self.on_complete, self.on_success = members, on_complete, on_success
        self.id = new_flow_id(flow_id)

    def _flow(self) -> tuple[TaskOwner, FlowDef, dict[str, dict[str, Any]]]:
        flow = group_flow(self.id, self.members, self.on_complete, None, "continue")
        if self.on_success is not None:
            flow = dataclasses.replace(flow, on_success=self.on_success.describe(after_result=True))
        _check_members(self.members)
        return _app_of(self.members), flow, {f"m{i}": d for i, d in enumerate(flow.steps)}


def batch(
    members: Iterable[Signature],
    *,
    on_complete: Signature | None = None,
    on_success: Signature | None = None,
    id: str | None = None,
) -> Batch:
    """Members that run together (as :func:`group`), with ``on_complete`` run once after every
    member ended whatever its outcome (the results in order, a failure's details in place of
    a failed member's) and ``on_success`` once after that when none failed (Sidekiq's batch
    callbacks, BullMQ's flow). Each runs exactly once."""
    return Batch(list(members), on_complete, on_success, id)


def chain(*steps: Signature, on_error: Signature | None = None, id: str | None = None) -> Chain:
    """Steps that run one after the other, each after the one before it succeeded, with its
    result as the first argument (``.si()`` for a step that takes none). A step that ends
    dead-lettered, cancelled or expired stops the chain; ``on_error`` then runs once with the
    failure's details (a dict: flow, step, job_id, task, reason, error_type, error_message,
    traceback) as its first argument, or for an errback of ``request, exc, traceback`` with
    those three as Celery gives them (see :mod:`._errbacks`)."""
    return Chain(list(steps), on_error, id)


def group(members: Iterable[Signature], *, on_failure: OnFailure = "stop", id: str | None = None) -> Group:
    """Members that run together, enqueued all or none (up to 999 in one atomic batch; more go
    in batches of 1,000, each all or none). ``on_failure``: ``stop`` (a member that ends
    without a result fails the group), ``continue`` (its failure's details take its place in
    the results), ``ignore`` (it is left out of them)."""
    return Group(list(members), on_failure, id)


def chord(
    members: Group | Iterable[Signature] | None = None,
    callback: Signature | None = None,
    *,
    on_error: Signature | None = None,
    header: Group | Iterable[Signature] | None = None,
    body: Signature | None = None,
) -> Chord:
    """``callback`` runs exactly once, after every member ended, with their results in order
    as its first argument; when the group fails (see :func:`group`'s ``on_failure``) it does
    not run, and ``on_error`` runs once instead. ``header`` and ``body`` are Celery's names
    of ``members`` and ``callback`` (``chord(header=..., body=...)``)."""
    given: Group | Iterable[Signature] = _one_of("members", members, "header", header)
    after: Signature = _one_of("callback", callback, "body", body)
    return Chord(given if isinstance(given, Group) else group(given), after, on_error)


def _one_of(name: str, given: Any, celery: str, celery_given: Any) -> Any:
    """The one of ``given`` and ``celery_given`` (Celery's name for it) that was passed."""
    found = [value for value in (given, celery_given) if value is not None]
    if len(found) != 1:
        missing = "not both" if found else "one is missing"
        raise ConfigurationError(f"chord takes {name} or {celery} (Celery's name for it): {missing}")
    return found[0]
