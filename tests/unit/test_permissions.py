"""Role permissions and the refusals the client reports (no server: the real-server proof is
tests/integration/test_permissions.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats.errors
import pytest
from click.testing import CliRunner

from jsworker._cli import cli
from jsworker._core.permissions import grants, permissions, role_table, server_config
from jsworker._errors import PermissionDeniedError
from jsworker._wire.names import ROLES
from jsworker.jetstream.denials import Denial, Denials, parse_denial

from ..support import wait_until_async


def test_producer_may_only_add_work_and_read_records() -> None:
    producer = permissions("shop", "producer")
    assert producer.subscribe == ("_jsw_inbox.shop.producer.>", "$KV.jsw_shop_jobs.>")  # replies, results
    assert producer.publish == (
        "jsw.shop.q.>",
        "jsw.shop.in.>",
        "jsw.shop.later.>",
        "jsw.shop.flow.def.*",
        "jsw.shop.ev.*.*.enqueued",
        "jsw.shop.ev.*.*.scheduled",
        # A Spark streaming sink's record of a committed micro-batch, and its read.
        "jsw.shop.sink.*",
        "$JS.API.STREAM.MSG.GET.JSW_SHOP_SINKS",
        "$JS.API.STREAM.MSG.GET.KV_jsw_shop_jobs",
        "jsw.shop.ask.status.*",
    )


def test_a_canceller_is_a_producer_that_may_ask_for_cancels() -> None:
    producer, canceller = permissions("shop", "producer"), permissions("shop", "canceller")
    assert canceller.subscribe == producer.subscribe  # a canceller connects as a producer
    assert set(canceller.publish) - set(producer.publish) == {"jsw.shop.ask.cancel.*"}


def test_operator_never_pulls_from_a_queue_and_worker_never_purges() -> None:
    operator = permissions("shop", "operator")
    assert not any(s.startswith("$JS.API.CONSUMER.MSG.NEXT.JSW_SHOP.") for s in operator.publish)
    assert "$JS.API.STREAM.PURGE.JSW_SHOP_DLQ" in operator.publish
    worker = permissions("shop", "worker")
    assert not any("PURGE" in s for s in worker.publish)
    # Single messages of the job and schedules streams: to cancel a job or remove a schedule.
    assert [s for s in worker.publish if "DELETE" in s] == [
        "$JS.API.STREAM.MSG.DELETE.JSW_SHOP",
        "$JS.API.STREAM.MSG.DELETE.JSW_SHOP_SCHED",
    ]
    # Replies, questions from producers, cancels of jobs it may hold, who runs a job.
    assert worker.subscribe == (
        "_jsw_inbox.shop.worker.>",
        "jsw.shop.ask.*.*",
        "jsw.shop.ask.worker.*.*",
        "jsw.shop.halt.*",
        "jsw.shop.held.*",
    )


def test_the_dashboard_reads_as_an_operator_and_takes_only_its_own_actions() -> None:
    dashboard, operator = permissions("shop", "dashboard"), permissions("shop", "operator")
    assert dashboard.subscribe == ("_jsw_inbox.shop.dashboard.>",)  # its replies, nothing else
    reads = {s for s in operator.publish if ".MSG.GET." in s or ".CONSUMER.INFO." in s or ".LIST." in s}
    # The claims are the workers' business; the sinks' batches a Spark writer's.
    reads -= {"$JS.API.STREAM.MSG.GET.JSW_SHOP_CLAIMS", "$JS.API.STREAM.MSG.GET.JSW_SHOP_SINKS"}
    assert reads <= set(dashboard.publish)
    # Its actions: enqueue again (replay, run now, trigger), ask the workers to cancel and to
    # pause or resume a schedule (it writes none), delete single messages (run now, remove a
    # schedule, a replayed dead letter), purge a queue or the dead letters, pause a queue's
    # consumer, ask the workers to change a queue's limits (as an operator does). The other
    # questions are its own: an operator pauses a schedule itself.
    assert set(dashboard.publish) - set(operator.publish) == {
        "jsw.shop.ask.pause.*",
        "jsw.shop.ask.resume.*",
        "jsw.shop.ask.schedule.*",
    }
    assert {s for s in dashboard.publish if "DELETE" in s or "PURGE" in s or "PAUSE" in s} == {
        "$JS.API.STREAM.MSG.DELETE.JSW_SHOP",
        "$JS.API.STREAM.MSG.DELETE.JSW_SHOP_SCHED",
        "$JS.API.STREAM.MSG.DELETE.JSW_SHOP_DLQ",
        "$JS.API.STREAM.PURGE.JSW_SHOP",
        "$JS.API.STREAM.PURGE.JSW_SHOP_DLQ",
        "$JS.API.CONSUMER.PAUSE.JSW_SHOP.*",
        "$JS.API.CONSUMER.DELETE.JSW_SHOP_DLQ.*",  # its own short-lived reading consumers
        "$JS.API.CONSUMER.DELETE.JSW_SHOP_EVENTS.*",
        "$JS.API.CONSUMER.DELETE.JSW_SHOP_DEPTH.*",
        "$JS.API.CONSUMER.DELETE.KV_jsw_shop_workers.*",
    }
    assert [s for s in dashboard.publish if not s.startswith("$JS.")] == [
        "jsw.shop.q.>",
        "jsw.shop.ask.cancel.*",
        "jsw.shop.held.*",
        "jsw.shop.ask.worker.*.quiet",
        "jsw.shop.ask.worker.*.stop",
        "jsw.shop.ask.limits.*",
        "jsw.shop.ask.pause.*",
        "jsw.shop.ask.schedule.*",
        "jsw.shop.ask.resume.*",
    ]
    # What it must not do: create streams or the queues' consumers, pull or settle a job,
    # write records, claims, dead letters or events, stop a job, advance a workflow.
    for refused in (
        "$JS.API.STREAM.CREATE.",
        "$JS.API.STREAM.UPDATE.",
        "$JS.API.CONSUMER.CREATE.JSW_SHOP.",
        "$JS.API.CONSUMER.DURABLE.",
        "$JS.API.CONSUMER.MSG.NEXT.JSW_SHOP.",
        "$JS.ACK.",
        "$KV.",
        "jsw.shop.claim.",
        "jsw.shop.halt.",
        "jsw.shop.dlq.",
        "jsw.shop.ev.",
        "jsw.shop.flow.",
        "jsw.shop.tally.",
        "jsw.shop.sched.",
    ):
        assert not any(s.startswith(refused) for s in dashboard.publish), refused
    assert not dashboard.answers


def test_workers_write_their_registry_entries_and_operators_read_them() -> None:
    worker = permissions("shop", "worker")
    assert "$KV.jsw_shop_workers.*" in worker.publish  # its entry, under the id it makes up
    assert "$JS.API.STREAM.INFO.KV_jsw_shop_workers" in worker.publish  # the bucket is provisioned
    assert not any("CONSUMER" in s and "KV_jsw_shop_workers" in s for s in worker.publish)
    operator = permissions("shop", "operator")
    assert not any(s.startswith("$KV.jsw_shop_workers") for s in operator.publish)  # reads only
    for verb in (
        "CREATE.KV_jsw_shop_workers",
        "MSG.NEXT.KV_jsw_shop_workers.*",
        "DELETE.KV_jsw_shop_workers.*",
    ):
        assert f"$JS.API.CONSUMER.{verb}" in operator.publish
    assert not any("workers" in s for s in permissions("shop", "producer").publish)


def test_only_the_provisioner_creates_or_updates_streams() -> None:
    """Workers, operators and dashboards check streams at most: a user that could update one
    could make it copy another app's messages (a ``source``). Nobody deletes a stream."""
    for role in ROLES:
        publish = permissions("shop", role).publish
        assert not any(s.startswith("$JS.API.STREAM.DELETE.") for s in publish), role
        changes = [s for s in publish if s.startswith(("$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE."))]
        assert bool(changes) == (role == "provisioner"), (role, changes)
    provisioner = permissions("shop", "provisioner")
    assert provisioner.subscribe == ("_jsw_inbox.shop.provisioner.>",)
    assert not provisioner.answers
    streams = {s.rsplit(".", 1)[1] for s in provisioner.publish if s.startswith("$JS.API.STREAM.")}
    assert {"JSW_SHOP", "JSW_SHOP_DLQ", "KV_jsw_shop_jobs", "KV_jsw_shop_workers"} <= streams
    assert set(provisioner.publish) == {
        f"$JS.API.STREAM.{verb}.{stream}" for stream in streams for verb in ("INFO", "CREATE", "UPDATE")
    } | {
        "$JS.API.CONSUMER.CREATE.JSW_SHOP.>",
        "$JS.API.CONSUMER.DURABLE.CREATE.JSW_SHOP.*",
        "$JS.API.CONSUMER.INFO.JSW_SHOP.*",
        # The consumer through which workers move fired jobs into their queues.
        "$JS.API.CONSUMER.CREATE.JSW_SHOP_SCHED.>",
        "$JS.API.CONSUMER.DURABLE.CREATE.JSW_SHOP_SCHED.*",
        "$JS.API.CONSUMER.INFO.JSW_SHOP_SCHED.*",
        # The final-state handlers' consumers on the jobs bucket.
        "$JS.API.CONSUMER.CREATE.KV_jsw_shop_jobs.>",
        "$JS.API.CONSUMER.DURABLE.CREATE.KV_jsw_shop_jobs.*",
        "$JS.API.CONSUMER.INFO.KV_jsw_shop_jobs.*",
    }
    # Workers still create their queues' consumers (a new queue comes with new code), but
    # only pull from the final-state handlers': one they made could deliver anywhere.
    worker = permissions("shop", "worker").publish
    assert "$JS.API.CONSUMER.CREATE.JSW_SHOP.>" in worker
    assert not any(s.startswith("$JS.API.CONSUMER.") and "CREATE.KV_" in s for s in worker)
    assert "$JS.API.CONSUMER.MSG.NEXT.KV_jsw_shop_jobs.*" in worker


def test_the_permissions_command_prints_the_provisioner() -> None:
    printed = CliRunner().invoke(cli, ["permissions", "shop", "--role", "provisioner"])
    assert printed.exit_code == 0, printed.output
    assert '{user: "shop-provisioner", password: $SHOP_PROVISIONER_PASSWORD,' in printed.output
    assert "$JS.API.STREAM.UPDATE.JSW_SHOP_DLQ" in printed.output


def test_the_documented_role_table_is_the_one_the_grants_make() -> None:
    documented = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    assert role_table() in documented, (
        "docs/security.md's role table differs: paste jsworker._core.permissions.role_table()"
    )
    assert all(grant.why and grant.roles <= set(ROLES) for grant in grants("shop"))


def test_inbox_prefix_and_app_case_follow_the_app() -> None:
    assert permissions("Shop", "worker", "corp.in.shop").subscribe[0] == "corp.in.shop.worker.>"
    assert "jsw.shop.q.>" in permissions("Shop", "producer").publish
    with pytest.raises(ValueError, match="unknown role"):
        permissions("shop", "admin")  # type: ignore[arg-type]


def test_server_config_names_users_and_password_variables() -> None:
    text = server_config(["shop", "my-app"], ("producer",))
    assert '{user: "shop-producer", password: $SHOP_PRODUCER_PASSWORD,' in text
    assert '{user: "my-app-producer", password: $MY_APP_PRODUCER_PASSWORD,' in text
    assert "worker" not in text


def test_cli_prints_the_same_permissions_as_json() -> None:
    result = CliRunner().invoke(cli, ["permissions", "shop", "--role", "worker", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"shop": {"worker": permissions("shop", "worker").as_config()}}
    refused = CliRunner().invoke(cli, ["permissions", "shop_dlq"])
    assert refused.exit_code == 2 and "_dlq" in refused.output


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        (
            'nats: permissions violation for publish to "$js.api.stream.purge.jsw_a"',
            ("publish", "$js.api.stream.purge.jsw_a"),
        ),
        ('nats: permissions violation for subscription to "_inbox.x.*"', ("subscribe", "_inbox.x.*")),
        ('nats: Permissions Violation for Subscription to "q" using queue "g"', ("subscribe", "q")),
        ("nats: slow consumer, messages dropped", None),
    ],
)
def test_parse_denial(reported: str, expected: tuple[str, str] | None) -> None:
    denial = parse_denial(nats.errors.Error(reported))
    assert (None if denial is None else (denial.operation, denial.subject)) == expected


def test_a_refusal_ends_the_waiting_request_at_once_with_the_callers_subject() -> None:
    """A request to the refused subject ends (no waiting out its timeout) with the error
    naming the subject as the caller spelled it; others keep waiting."""

    async def scenario() -> None:
        denials = Denials()
        heard: list[Denial] = []
        denials.listen(heard.append)

        never = asyncio.Event()  # the server's answer, which never comes
        watching: list[str] = []

        async def request(subject: str) -> PermissionDeniedError | None:
            scope = denials.watch(subject)
            watching.append(subject)
            try:
                async with scope:
                    await never.wait()
            except TimeoutError:
                return denials.refusal(subject, scope)
            finally:
                denials.done(subject, scope)
            return None

        refused = asyncio.ensure_future(request("$JS.API.STREAM.PURGE.JSW_A"))
        other = asyncio.ensure_future(request("$JS.API.STREAM.INFO.JSW_A"))
        await wait_until_async(lambda: len(watching) == 2, timeout=5, message="both requests to wait")
        assert denials.report(
            nats.errors.Error('nats: permissions violation for publish to "$js.api.stream.purge.jsw_a"')
        )
        error = await asyncio.wait_for(refused, 5)
        assert isinstance(error, PermissionDeniedError) and error.subject == "$JS.API.STREAM.PURGE.JSW_A"
        assert not other.done() and [d.operation for d in heard] == ["publish"]
        other.cancel()

    asyncio.run(scenario())


def test_a_refused_request_inbox_fails_every_request_from_then_on() -> None:
    async def scenario() -> None:
        denials = Denials()
        denials.inbox_prefix = "_jsw_inbox.a.producer"
        assert not denials.report(nats.errors.Error("nats: slow consumer"))
        denials.check()
        denials.report(
            nats.errors.Error('nats: permissions violation for subscription to "_jsw_inbox.a.producer.xyz.*"')
        )
        with pytest.raises(PermissionDeniedError, match="subscribe on"):
            denials.check()

    asyncio.run(scenario())


def test_a_refused_publish_is_remembered_for_the_request_that_met_the_inbox_refusal_first() -> None:
    """The server answers an inbox's subscription before the publish sent after it: a request
    ended by the inbox's refusal asks, after a round trip, whether its own publish was refused,
    which says more (the subject of another app, say)."""

    async def scenario() -> None:
        denials = Denials()
        denials.inbox_prefix = "_jsw_inbox.a.producer"
        assert denials.report(
            nats.errors.Error('nats: permissions violation for subscription to "_jsw_inbox.a.producer.x.*"')
        )
        assert denials.publish_refusal("jsw.b.q.default.t.1") is None
        assert denials.report(
            nats.errors.Error('nats: permissions violation for publish to "jsw.b.q.default.t.1"')
        )
        refused = denials.publish_refusal("jsw.b.q.default.t.1")
        assert (
            refused is not None
            and refused.operation == "publish"
            and refused.subject == "jsw.b.q.default.t.1"
        )
        assert denials.publish_refusal("jsw.b.q.default.t.2") is None

    asyncio.run(scenario())
