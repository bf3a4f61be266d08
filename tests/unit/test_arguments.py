"""Typed task arguments: checked and encoded at enqueue, decoded at run (no server)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import uuid
from decimal import Decimal
from typing import Any, NamedTuple, TypedDict

import pydantic
import pytest

from jsworker import App
from jsworker.arguments import TypedArguments
from jsworker.serializers import JSONSerializer, decode_call, encode_call


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Item:
    sku: str
    qty: int


class Address(TypedDict):
    city: str
    zip: str


class Point(NamedTuple):
    x: int
    y: int


class Customer(pydantic.BaseModel):
    name: str
    age: int


class Opaque:
    """A class of the app's own that no converter knows: passed as it is."""


def _app(**kw: Any) -> App:
    return App("typed", "nats://127.0.0.1:1", **kw)


def _roundtrip(task: Any, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What the function receives in the worker after enqueue-side encoding and JSON."""
    call = task.make_call(args, kwargs, None)
    body = encode_call(JSONSerializer(), call.args, call.kwargs)
    sent_args, sent_kwargs = decode_call(JSONSerializer(), body)
    task.check_arguments(sent_args, sent_kwargs)
    decoded: tuple[tuple[Any, ...], dict[str, Any]] = task.typed.decode(sent_args, sent_kwargs)
    return decoded


def test_standard_library_types_dataclasses_and_models_come_back_as_themselves() -> None:
    app = _app()

    @app.task
    def charge(
        amount: Decimal,
        when: datetime.datetime,
        day: datetime.date,
        ref: uuid.UUID,
        color: Color,
        items: list[Item],
        address: Address,
        point: Point,
        customer: Customer,
        by_id: dict[int, str],
        note: str | None = None,
    ) -> None: ...

    values = dict(
        amount=Decimal("12.50"),
        when=datetime.datetime(2026, 11, 23, 8, 30, tzinfo=datetime.UTC),
        day=datetime.date(2026, 11, 23),
        ref=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        color=Color.BLUE,
        items=[Item("a", 1), Item("b", 2)],
        address={"city": "Lyon", "zip": "69001"},
        point=Point(1, 2),
        customer=Customer(name="Ada", age=36),
        by_id={1: "a", 2: "b"},
    )
    args, kwargs = _roundtrip(charge, *values.values())
    received = dict(zip(list(values), args, strict=True)) | kwargs
    assert received == values
    assert all(type(received[k]) is type(v) for k, v in values.items())


def test_a_wrong_type_is_a_type_error_naming_the_parameter_and_nothing_is_encoded() -> None:
    app = _app()

    @app.task
    def pay(user_id: int, items: list[Item], customer: Customer | None = None) -> None: ...

    with pytest.raises(TypeError, match=r"argument 'user_id' \(int\): Expected `int`, got `str`"):
        pay.make_call(("7", []), {}, None)
    with pytest.raises(TypeError, match=r"argument 'items'.*\$\[0\]\.qty"):
        pay.make_call((1, [Item("a", "1")]), {}, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"argument 'customer'.*age"):
        pay.make_call((1, []), {"customer": {"name": "x", "age": "old"}}, None)
    with pytest.raises(TypeError, match=r"argument 'user_id'.*got `bool`"):
        pay.make_call((True, []), {}, None)


def test_unannotated_any_and_unknown_classes_travel_as_before() -> None:
    app = _app()

    @app.task
    def loose(a, b: Any, c: Opaque, d: int = 0):  # type: ignore[no-untyped-def]
        ...

    assert loose.typed is not None and set(loose.typed.params) == {"d"}
    call = loose.make_call(("x", {"k": 1}, [1]), {"d": 3}, None)
    assert call.args == ("x", {"k": 1}, [1]) and call.kwargs == {"d": 3}

    @app.task
    def untyped(a, b):  # type: ignore[no-untyped-def]
        ...

    assert untyped.typed is None


def test_var_positional_and_keyword_parameters_are_checked_item_by_item() -> None:
    app = _app()

    @app.task
    def total(*amounts: Decimal, **tags: Color) -> None: ...

    args, kwargs = _roundtrip(total, Decimal("1.5"), Decimal("2"), kind=Color.RED)
    assert args == (Decimal("1.5"), Decimal("2")) and kwargs == {"kind": Color.RED}
    with pytest.raises(TypeError, match="argument 'tags'"):
        total.make_call((), {"kind": "green"}, None)


def test_decoding_a_hand_made_body_names_the_parameter() -> None:
    app = _app()

    @app.task
    def ship(when: datetime.date, qty: int) -> None: ...

    assert ship.typed is not None
    assert ship.typed.decode(["2026-01-02", "3"], {}) == ((datetime.date(2026, 1, 2), 3), {})
    with pytest.raises(TypeError, match=r"argument 'when' \(date\)"):
        ship.typed.decode(["not a date", 1], {})


def test_validation_can_be_turned_off() -> None:
    app = _app(validate_arguments=False)

    @app.task
    def pay(user_id: int) -> None: ...

    assert pay.typed is None
    assert pay.make_call(("7",), {}, None).args == ("7",)


def test_encoded_values_are_plain_json() -> None:
    typed = TypedArguments.of(
        "t", lambda amount, when: None, __import__("inspect").signature(lambda amount, when: None)
    )
    assert typed is None  # no annotations at all
    app = _app()

    @app.task
    def f(amount: Decimal, when: datetime.datetime, m: dict[int, str]) -> None: ...

    call = f.make_call(
        (Decimal("1.10"), datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), {1: "a"}), {}, None
    )
    assert json.loads(encode_call(JSONSerializer(), call.args, call.kwargs)) == {
        "args": ["1.10", "2026-01-01T00:00:00Z", {"1": "a"}],
        "kwargs": {},
    }
