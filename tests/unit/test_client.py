"""The client subclass: its header fast path agrees with nats-py, and the nats-py internals it uses."""

from __future__ import annotations

import ast
import asyncio
import random
from pathlib import Path

import pytest
import structlog
from nats.aio.client import Client

from jsworker.jetstream import client as client_module
from jsworker.jetstream.client import (
    INTERNALS,
    SUBSCRIPTION_ID,
    Internal,
    JetStreamClient,
    internals_problems,
)
from jsworker.jetstream.headers import parse_plain_headers

ROOT = Path(__file__).parents[2]
CLIENT_PY = ROOT / "jsworker" / "jetstream" / "client.py"


def _parse(client: Client, block: bytes) -> dict[str, str] | None:
    async def run() -> dict[str, str] | None:
        if isinstance(client, JetStreamClient):
            return await client._plain_process_headers(block)
        return await client._process_headers(block)

    return asyncio.run(run())


def _both(block: bytes) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    return _parse(JetStreamClient(), block), _parse(Client(), block)


JOB = (
    b"NATS/1.0\r\nNats-Msg-Id: 0f8e5a3c2b1d4e6f\r\nJsw-Task: noop\r\n"
    b"Jsw-Enqueued-At: 1795325908066727278\r\n\r\n"
)

CASES = [
    JOB,
    b"NATS/1.0\r\nA: 1\r\n\r\n",
    b"NATS/1.0\r\nA: x: y\r\n\r\n",  # ": " inside the value
    b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n",  # a repeated name: the last one wins
    b"NATS/1.0\r\nA: \r\n\r\n",  # empty value
    b"NATS/1.0\r\nA:  1\r\n\r\n",  # value with leading whitespace
    b"NATS/1.0\r\nA: 1 \r\n\r\n",  # value with trailing whitespace
    b"NATS/1.0\r\nA: 1\t\r\n\r\n",
    b"NATS/1.0\r\nA:1\r\n\r\n",  # no space after the colon
    b"NATS/1.0\r\nA :1\r\n\r\n",
    b"NATS/1.0\r\nA B: 1\r\n\r\n",  # whitespace in the name
    b"NATS/1.0\r\na:b: c\r\n\r\n",  # colon in the name
    b"NATS/1.0\r\nno colon\r\nA: 1\r\n\r\n",
    b"NATS/1.0\r\nA: 1\r\n\r\nB: 2\r\n\r\n",  # an empty line in the middle
    b"NATS/1.0\r\nA: caf\xc3\xa9\r\n\r\n",  # UTF-8 value
    b"NATS/1.0\r\nA: \xff\xfe\r\n\r\n",  # not UTF-8: nats-py replaces
    b"NATS/1.0\r\nK\xc3\xa9: 1\r\n\r\n",  # non-ASCII name: nats-py drops it
    b"NATS/1.0\r\nA: 1\nB: 2\r\n\r\n",  # a bare LF
    b"NATS/1.0\r\nA: \xc2\xa01\r\n\r\n",  # a non-ASCII space is not stripped
    b"NATS/1.0\r\n\r\n",  # no headers at all
    b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
    b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\nNats-Pending-Bytes: 0\r\n\r\n",
    b"NATS/1.0 409 Consumer Deleted\r\n\r\n",
    b"NATS/1.0 503\r\n\r\n",
]


@pytest.mark.parametrize("block", CASES, ids=range(len(CASES)))
def test_same_headers_as_nats_py(block: bytes) -> None:
    ours, theirs = _both(block)
    assert ours == theirs


def test_job_headers_take_the_fast_path() -> None:
    # Guards the point of the module: the usual job block must not fall back.
    assert parse_plain_headers(JOB) == {
        "Nats-Msg-Id": "0f8e5a3c2b1d4e6f",
        "Jsw-Task": "noop",
        "Jsw-Enqueued-At": "1795325908066727278",
    }


@pytest.mark.parametrize(
    "block", [b"NATS/1.0\r\nA:  1\r\n\r\n", b"NATS/1.0 503\r\n\r\n", b"NATS/1.0\r\n\r\n"]
)
def test_unusual_blocks_go_to_nats_py(block: bytes) -> None:
    assert parse_plain_headers(block) is None


def test_random_blocks_agree() -> None:
    # "Name: Value" lines whose parts include the characters that matter to either parser:
    # some blocks are plain, many are not, and both kinds must come out the same.
    rng = random.Random(20261122)
    name_parts = [b"A", b"b", b"-", b"1"] * 4 + [b":", b" ", b"\t", b"\xc3\xa9"]
    value_parts = [b"x", b"1", b"\xc3\xa9"] * 8 + [
        b":",
        b": ",
        b" ",
        b"\t",
        b"\r",
        b"\n",
        b"\x0b",
        b"\xc3\xa9",
        b"\xff",
        b"\xc2\xa0",
    ]
    ours, theirs = JetStreamClient(), Client()
    plain = 0

    async def run() -> None:
        nonlocal plain
        for _ in range(3000):
            lines = [
                b"".join(rng.choices(name_parts, k=rng.randint(0, 3)))
                + rng.choice([b": ", b": ", b":", b" : "])
                + b"".join(rng.choices(value_parts, k=rng.randint(0, 4)))
                for _ in range(rng.randint(1, 3))
            ]
            block = b"NATS/1.0\r\n" + b"\r\n".join(lines) + b"\r\n\r\n"
            plain += parse_plain_headers(block) is not None
            assert await ours._plain_process_headers(block) == await theirs._process_headers(block), block

    asyncio.run(run())
    assert 200 < plain < 2800, plain  # both paths were exercised


def test_client_internals_the_subclass_relies_on() -> None:
    """nats-py's methods are as INTERNALS says (attributes are checked on a connected client,
    in the integration tests); a nats-py release that changes them fails here."""
    assert internals_problems(Client()) == []


def test_every_private_name_client_py_uses_is_checked() -> None:
    """client.py reads or calls no nats-py private name that INTERNALS does not list."""
    tree = ast.parse(CLIENT_PY.read_text())
    own = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("_")
    } | {
        target.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign | ast.Assign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(node, ast.AnnAssign)
    }
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and isinstance(node.value, ast.Name)
        and node.value.id in {"self", "client", "Client"}
    }
    checked = {internal.name for internal in INTERNALS}
    assert used - own <= checked, used - own - checked
    assert SUBSCRIPTION_ID in CLIENT_PY.read_text()


def test_no_other_module_uses_a_private_name_of_another_object() -> None:
    """Outside client.py, jsworker touches no ``_private`` attribute of anything but itself
    (nats-py's objects included): the coupling to nats-py's internals stays in one file."""
    offenders = []
    for path in sorted((ROOT / "jsworker").rglob("*.py")):
        if path == CLIENT_PY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert offenders == []


def test_a_mismatch_turns_the_fast_path_off_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed internal is reported and leaves the client on nats-py's own paths."""
    changed = (*INTERNALS[:-1], Internal("_no_such_method", "method"))
    monkeypatch.setattr(client_module, "INTERNALS", changed)
    monkeypatch.setattr(client_module, "_warned", False)
    with structlog.testing.capture_logs() as logs:
        first, second = JetStreamClient(), JetStreamClient()
        assert not first.enable_fast_path()
        assert not second.enable_fast_path()
    assert [entry["event"] for entry in logs] == ["client.fast_path_off"]
    assert "Client._no_such_method is missing" in logs[0]["nats_py_changed"]
    assert not first.fast_path
    assert "_process_msg" not in vars(first)  # nats-py's read path is untouched
