"""The provisioning step against a server whose users hold the printed permissions: only the
``provisioner`` creates and changes streams, a worker waits for it (stops, naming it), and
``jsworker provision`` is idempotent and applies a changed setting."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
import pytest

from jsworker import PermissionDeniedError
from jsworker._core.permissions import server_config
from jsworker._wire.names import Role
from jsworker.jetstream.api import api_subject, request_json
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from ..support import wait_until
from .secured import ADMIN, PASSWORD, as_user, provision, role_app, role_cli, server_with
from .workers import records, start_worker, stop


async def _admin_other_dlq(url: str) -> None:
    """App ``other``'s dead-letter stream, made as ``admin``."""
    nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
    try:
        await nc.jetstream().add_stream(name="JSW_OTHER_DLQ", subjects=["jsw.other.dlq.>"])
    finally:
        await nc.close()


async def _admin_config(url: str, stream: str) -> Any:
    nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
    try:
        return (await nc.jetstream().stream_info(stream)).config
    finally:
        await nc.close()


def test_a_worker_stops_until_the_streams_are_provisioned(secured: NatsServer, tmp_path: Path) -> None:
    """A worker with its role's permissions on an empty server exits non-zero, naming the
    command that fixes it; after ``jsworker provision`` run as the provisioner the same worker
    starts and runs a job."""
    url, record, log = secured.url, tmp_path / "record", tmp_path / "worker.log"
    refused = start_worker(url, record, log, module="perm_app", env=as_user("perm-worker"))
    try:
        code = wait_until(
            refused.poll, until=lambda rc: rc is not None, timeout=30, message="the worker to exit"
        )
    finally:
        stop(refused)
    text = log.read_text()
    assert code == 3, text
    assert "jsworker provision perm_app" in text and "JSW_PERM" in text, text

    out = provision(url)
    assert "stream JSW_PERM: created" in out and "consumer JSW_PERM > default: created" in out, out
    worker = start_worker(url, record, log, module="perm_app", env=as_user("perm-worker"))
    try:
        producer = role_app(url, "perm-producer")
        job = producer.tasks["add"].delay(2, 3)
        assert job.result(timeout=20) == 5
        producer.close()
        assert [job_id for job_id, _, _ in records(record)] == [job.id]
    finally:
        assert stop(worker) == 0


# The real attack: a user that may update an app's stream makes it copy another app's dead
# letters (job arguments included) through a `source`.
_SOURCED = {
    "name": "JSW_PERM_DLQ",
    "subjects": ["jsw.perm.dlq.>"],
    "retention": "limits",
    "storage": "file",
    "sources": [{"name": "JSW_OTHER_DLQ"}],
}
_NEW = {"name": "JSW_PERM_TALLY", "subjects": ["jsw.perm.tally.*"], "retention": "limits", "storage": "file"}


async def _try(url: str, user: str, role: Role, verb: str, config: dict[str, Any]) -> dict[str, Any]:
    app = role_app(url, user)
    conn = await Connection.open(app.connect_options(role, "attack"))
    try:
        return await request_json(conn, api_subject(f"STREAM.{verb}", str(config["name"])), config)
    finally:
        await conn.close()


@pytest.mark.parametrize("role", ["worker", "operator", "dashboard"])
def test_only_the_provisioner_may_create_or_reshape_a_stream(secured: NatsServer, role: Role) -> None:
    """Workers, operators and dashboards are refused a stream's update (adding another app's
    dead letters as a source) and a stream's create; the provisioner is allowed both."""
    url = secured.url
    provision(url)

    async def scenario() -> None:
        await _admin_other_dlq(url)
        for verb, config in (("UPDATE", _SOURCED), ("CREATE", _NEW)):
            with pytest.raises(PermissionDeniedError) as refused:
                await _try(url, f"perm-{role}", role, verb, config)
            assert refused.value.subject == f"$JS.API.STREAM.{verb}.{config['name']}"
        assert (await _admin_config(url, "JSW_PERM_DLQ")).sources is None
        await _try(url, "perm-provisioner", "provisioner", "UPDATE", _SOURCED)
        assert [s.name for s in (await _admin_config(url, "JSW_PERM_DLQ")).sources] == ["JSW_OTHER_DLQ"]
        await _try(url, "perm-provisioner", "provisioner", "CREATE", _NEW)
        assert (await _admin_config(url, "JSW_PERM_TALLY")).name == "JSW_PERM_TALLY"

    asyncio.run(scenario())


def test_provisioning_again_changes_only_what_changed(secured: NatsServer) -> None:
    """A second run leaves everything as is; a changed setting (the dead letters' max age) is
    applied to its stream alone."""
    url = secured.url
    first = provision(url)
    assert "created" in first and "as is" not in first, first
    second = provision(url)
    lines = second.splitlines()
    assert lines and all(line.endswith(": as is") for line in lines), second
    assert lines == [line.replace("created", "as is") for line in first.splitlines()]

    changed = role_cli(url, "perm-provisioner", "provision", "perm_app", env={"JSWORKER_DLQ_MAX_AGE": "3600"})
    assert changed.returncode == 0, changed.stderr
    updated = [line for line in changed.stdout.splitlines() if not line.endswith(": as is")]
    assert updated == ["stream JSW_PERM_DLQ: updated"], changed.stdout
    assert asyncio.run(_admin_config(url, "JSW_PERM_DLQ")).max_age == 3600


def test_provisioning_refused_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provisioner refused one stream's create fails with that stream named; another role's
    user is refused at once."""
    monkeypatch.setenv("PERM_PROVISIONER_PASSWORD", PASSWORD.format("perm-provisioner"))
    monkeypatch.setenv("PERM_OPERATOR_PASSWORD", PASSWORD.format("perm-operator"))
    block = server_config(["perm"], ("provisioner", "operator"))
    create = '"$JS.API.STREAM.CREATE.JSW_PERM_DLQ", '
    assert create in block
    server = server_with(tmp_path, block.replace(create, ""))
    try:
        done = role_cli(server.url, "perm-provisioner", "provision", "perm_app")
        assert done.returncode == 3, done.stdout
        assert "stream JSW_PERM_DLQ does not exist and this user may not create it" in done.stderr
        other = role_cli(server.url, "perm-operator", "provision", "perm_app")
        assert other.returncode == 3, other.stdout
        assert "error: permission denied" in other.stderr, other.stderr
    finally:
        server.stop()
