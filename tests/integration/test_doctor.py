"""``jsworker doctor`` against real servers: what it says of an app that is fine, of one whose
streams are missing, and of servers that acknowledge writes before they are on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jsworker import App, Schedules
from jsworker._cli.doctor import EXIT_PROBLEM
from jsworker._core.permissions import server_config
from jsworker.admin._doctor import diagnose
from jsworker.testing import NatsCluster, NatsServer

from ..support import connected
from .secured import ADMIN, as_user, provision, role_cli, server_with
from .workers import cli


def _lines(output: str, check: str) -> list[str]:
    return [line for line in output.splitlines() if line.split()[1:2] == [check]]


def test_a_provisioned_app_is_fine_and_a_missing_stream_is_a_problem(nats_server: NatsServer) -> None:
    before = cli(nats_server.url, "doctor", "doctor_app")
    assert before.returncode == EXIT_PROBLEM, before.stderr
    assert "PROBLEM  streams     JSW_DOC does not exist: run `jsworker provision`" in before.stdout
    assert "PROBLEM  streams     JSW_DOC_P1 does not exist" in before.stdout
    assert cli(nats_server.url, "provision", "doctor_app").returncode == 0
    after = cli(nats_server.url, "doctor", "doctor_app", "--monitoring", nats_server.monitoring_url)
    assert after.returncode == 0, after.stdout + after.stderr
    assert _lines(after.stdout, "streams")[0].startswith("ok       streams     ")
    assert "ok       partitions  queue default: 2 partitions, waiting 0/0" in after.stdout
    # One server on its own: its default flush is what a development machine runs.
    (durable,) = _lines(after.stdout, "durability")
    assert durable.startswith("ok") and "writes reach disk every 120s" in durable, durable
    found = json.loads(cli(nats_server.url, "doctor", "doctor_app", "--json").stdout)
    checks = {"server", "streams", "consumers", "partitions", "clock", "durability"}
    assert {f["check"] for f in found} >= checks


def test_a_cluster_that_flushes_lazily_is_warned_of(nats_cluster: NatsCluster) -> None:
    urls = ",".join(nats_cluster.urls)
    assert cli(urls, "provision", "doctor_app").returncode == 0
    monitoring = [arg for node in nats_cluster.nodes for arg in ("--monitoring", node.monitoring_url)]
    done = cli(urls, "doctor", "doctor_app", *monitoring)
    warned = _lines(done.stdout, "durability")
    assert len(warned) == 3 and all(line.startswith("warning") for line in warned), done.stdout
    assert "(set sync_interval: always, see deploy/nats)" in warned[0]


def test_a_server_that_syncs_every_write_is_fine(tmp_path: Path) -> None:
    config = tmp_path / "sync.conf"
    config.write_text("jetstream { sync_interval: always }\n")
    with NatsServer(extra_args=["-c", str(config)]) as server:
        done = cli(server.url, "doctor", "doctor_app", "--monitoring", server.monitoring_url)
    (durable,) = _lines(done.stdout, "durability")
    assert durable.startswith("ok") and "(sync always)" in durable, done.stdout


async def _findings(app: App, check: str) -> list[tuple[str, str]]:
    conn = await app.connections.connection()
    return [(f.level, f.message) for f in await diagnose(app, conn) if f.check == check]


@pytest.mark.anyio
async def test_streams_and_consumers_that_differ_from_the_code_are_named_with_their_settings(
    nats_server: NatsServer,
) -> None:
    """A job stream whose duplicate window and a queue consumer whose ack wait were changed on
    the server (by hand, or by an older release): each setting named, now and as declared;
    ``provision`` puts them back, and the checks are ok again."""
    app = App("drift", nats_server.url)

    @app.task
    async def work() -> None: ...

    await app.provision()
    async with connected(nats_server.url) as nc:
        js = nc.jetstream()
        stream = (await js.stream_info("JSW_DRIFT")).config
        stream.duplicate_window = 30.0
        await js.update_stream(stream)
        consumer = (await js.consumer_info("JSW_DRIFT", "default")).config
        consumer.ack_wait = 5.0
        await js.add_consumer("JSW_DRIFT", consumer)
    assert await _findings(app, "streams") == [
        (
            "warning",
            "JSW_DRIFT differs from the code: duplicate window 30s (declared 120s). `jsworker provision` "
            "(or a worker's start) brings it in line",
        )
    ]
    ((level, said),) = await _findings(app, "consumers")
    assert level == "warning" and said.startswith(
        "queue default on JSW_DRIFT differs from the code: ack wait 5s"
    )
    await app.provision()
    assert [level for level, _ in await _findings(app, "streams") + await _findings(app, "consumers")] == [
        "ok"
    ] * 2
    await app.aclose()


@pytest.mark.anyio
async def test_schedules_declared_installed_changed_and_left_behind_are_told_apart(
    nats_server: NatsServer,
) -> None:
    before = App("cron", nats_server.url)
    after = App("cron", nats_server.url)
    for app in (before, after):

        @app.task
        async def report() -> None: ...

        app.schedule(report, cron="0 6 * * *", name="kept")
    before.schedule(before.tasks["report"], cron="0 7 * * *", name="changed")
    before.schedule(before.tasks["report"], cron="0 8 * * *", name="left")
    after.schedule(after.tasks["report"], cron="0 9 * * *", name="changed")
    after.schedule(after.tasks["report"], cron="0 10 * * *", name="new")
    async with Schedules(before) as schedules:
        await schedules.sync()
    assert await _findings(after, "schedules") == [
        (
            "warning",
            "declared, not installed: new; a worker installs them when it starts, or run "
            "`jsworker schedules sync MODULE`",
        ),
        (
            "warning",
            "installed as an earlier version of the code declared them: changed; run "
            "`jsworker schedules sync MODULE`",
        ),
        (
            "warning",
            "installed, declared by no code here: left; they keep firing until "
            "`jsworker schedules sync MODULE --prune` removes them",
        ),
    ]
    async with Schedules(after) as schedules:
        await schedules.sync(prune=True)
    assert await _findings(after, "schedules") == [("ok", "3 declared, all installed as declared")]
    for app in (before, after):
        await app.aclose()


def test_the_credential_in_use_is_compared_with_its_role(secured: NatsServer, tmp_path: Path) -> None:
    """On a server whose users are the printed ones: an operator is its role and no more; an
    administrator's credential may delete streams of any name (a problem: no role may); a user
    named as another app's role is not compared."""
    provision(secured.url)

    def credentials(user: str, password: str | None = None) -> list[str]:
        env = as_user(user) if password is None else {"JSWORKER_USER": user, "JSWORKER_PASSWORD": password}
        done = role_cli(secured.url, user, "doctor", "perm_app", "--json", env=env)
        return [
            f"{f['level']} {f['message']}" for f in json.loads(done.stdout) if f["check"] == "credentials"
        ]

    assert credentials("perm-operator") == ["ok user perm-operator: role operator, nothing beyond it seen"]
    broad, unnamed = credentials(*ADMIN)
    assert broad.startswith("problem user admin may delete streams of any name"), broad
    assert unnamed.startswith("warning user admin is not named as a role of app perm"), unnamed
    (other,) = credentials("other-operator")
    assert other.startswith("warning user other-operator is not named as a role of app perm"), other


def test_a_user_refused_what_its_role_is_granted_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``perm-worker`` given only the producer's permissions: its role's reads are refused."""
    monkeypatch.setenv("PERM_PRODUCER_PASSWORD", "pw")
    block = server_config(["perm"], roles=["producer"]).replace('"perm-producer"', '"perm-worker"')
    server = server_with(tmp_path, block)
    try:
        env = {"JSWORKER_USER": "perm-worker", "JSWORKER_PASSWORD": "pw"}
        done = role_cli(server.url, "perm-worker", "doctor", "perm_app", "--json", env=env)
    finally:
        server.stop()
    assert done.stdout, done.stderr
    found = json.loads(done.stdout)
    (said,) = [f for f in found if f["check"] == "credentials"]
    assert said["level"] == "problem"
    assert said["message"].startswith("user perm-worker (role worker) is refused what its role is granted: ")
    assert "$JS.API.STREAM.INFO.JSW_PERM," in said["message"]
