"""``jsworker doctor`` against real servers: what it says of an app that is fine, of one whose
streams are missing, and of servers that acknowledge writes before they are on disk."""

from __future__ import annotations

import json
from pathlib import Path

from jsworker._cli.doctor import EXIT_PROBLEM
from jsworker.testing import NatsCluster, NatsServer

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
