"""Typed task arguments: checked and encoded at enqueue, decoded at run (no server)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import inspect
import json
import pathlib
import uuid
from decimal import Decimal
from typing import Any, NamedTuple, TypedDict

import pydantic
import pytest

from jsworker import App
from jsworker._core.serializers import JSONSerializer, decode_call, encode_call
from jsworker._enqueue.arguments import TypedArguments


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


def test_scalar_parameters_take_exactly_their_type_as_it_is_and_convert_anything_else() -> None:
    app = _app()

    @app.task
    def charge(account: int, amount: float, note: str, urgent: bool, extra) -> None: ...  # type: ignore[no-untyped-def]

    typed = charge.typed
    assert typed is not None
    args = [7, 2.5, "rent", True, {"any": "thing"}]
    decoded, kwargs = typed.decode(args, {})
    assert decoded == tuple(args) and kwargs == {}
    assert [type(v) for v in decoded[:4]] == [int, float, str, bool]
    # An int where a float is annotated, and a hand-made "3" where an int is, are converted
    # as before, not passed through.
    (account, amount, *_), _ = typed.decode(["3", 2, "rent", False, None], {})
    assert (account, type(account), amount, type(amount)) == (3, int, 2.0, float)
    with pytest.raises(TypeError, match=r"argument 'account'"):
        typed.decode(["three", 2.5, "rent", True, None], {})


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


# -- paths, the Python types errors name, what cannot be encoded -------------------------------


@dataclasses.dataclass
class Doc:
    source: pathlib.Path
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    lines: list[Item] = dataclasses.field(default_factory=list)
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node]


@dataclasses.dataclass
class Counts:
    by_id: dict[int, int]


def test_paths_travel_as_their_posix_string_and_come_back_as_the_annotated_class() -> None:
    app = _app()

    @app.task
    def index(
        path: pathlib.Path,
        pure: pathlib.PurePath,
        posix: pathlib.PurePosixPath,
        windows: pathlib.PureWindowsPath,
        doc: Doc,
        many: list[pathlib.Path],
        maybe: pathlib.Path | None = None,
    ) -> None: ...

    values: dict[str, Any] = dict(
        path=pathlib.Path("/srv/data/in.csv"),
        pure=pathlib.PurePosixPath("rel/file.txt"),
        posix=pathlib.PurePosixPath("/etc/hosts"),
        windows=pathlib.PureWindowsPath(r"C:\Users\ada\report.pdf"),
        doc=Doc(pathlib.Path("/srv/doc.md")),
        many=[pathlib.Path("a"), pathlib.Path("b/c")],
        maybe=pathlib.Path("/tmp/x"),
    )
    call = index.make_call((), values, None)
    assert json.loads(encode_call(JSONSerializer(), call.args, call.kwargs))["kwargs"] == {
        "path": "/srv/data/in.csv",
        "pure": "rel/file.txt",
        "posix": "/etc/hosts",
        "windows": "C:/Users/ada/report.pdf",
        "doc": {"source": "/srv/doc.md", "extra": {}, "lines": [], "tags": []},
        "many": ["a", "b/c"],
        "maybe": "/tmp/x",
    }
    _, received = _roundtrip(index, **values)
    assert received == values
    assert isinstance(received["path"], pathlib.Path) and isinstance(received["doc"].source, pathlib.Path)
    assert type(received["windows"]) is pathlib.PureWindowsPath
    # The string form is accepted too, as for every type whose JSON form is a string.
    assert _roundtrip(index, *["/a", "b", "/c", "d", Doc(pathlib.Path("e")), []])[0][0] == pathlib.Path("/a")
    with pytest.raises(TypeError, match=r"argument 'path' \(Path\): Expected `Path`, got `int`"):
        index.make_call((3, "b", "/c", "d", Doc(pathlib.Path("e")), []), {}, None)


@pytest.mark.parametrize(
    ("annotation", "value", "got"),
    [
        (list[int], {1, 2}, r"Expected `array`, got `set` \(a set has no order"),
        (list[int], frozenset({1}), "got `frozenset`"),
        (tuple[int, ...], {1}, "got `set`"),
        (dict[str, int], {1, 2}, "Expected `object`, got `set`"),
        (int, {1}, "got `set`"),
        (str, b"x", "Expected `str`, got `bytes`"),
        (str, bytearray(b"x"), "got `bytearray`"),
        (int, b"x", "got `bytes`"),
        (str, Decimal("1.5"), "got `Decimal`"),
        (str, uuid.UUID(int=1), "got `UUID`"),
        (str, datetime.datetime(2026, 1, 1), "got `datetime`"),
        (str, pathlib.PurePosixPath("/a"), "got `PurePosixPath`"),
        (int, Item("a", 1), "Expected `int`, got `Item`"),
        (int, (1, 2), "got `tuple`"),
        (dict[str, list[int]], {"a": [1], "b": {2}}, r"got `set` - at `\$\[\.\.\.\]`"),
        (dict[str, list[int]], {"a": [1, b"2"]}, r"got `bytes` - at `\$\[\.\.\.\]\[1\]`"),
        (list[Item], [Item(b"a", 1)], r"Expected `str`, got `bytes` - at `\$\[0\]\.sku`"),  # type: ignore[arg-type]
        (Doc, Doc(pathlib.Path("a"), tags={"x"}), r"got `set` - at `\$\.tags`"),  # type: ignore[arg-type]
        (Doc, Doc(pathlib.Path("a"), lines=[Item("a", "1")]), r"got `str` - at `\$\.lines\[0\]\.qty`"),  # type: ignore[arg-type]
        (list[int] | None, {1}, "got `set`"),
        (Node, Node("r", [Node("c", {1})]), r"got `set` - at `\$\.children\[0\]\.children`"),  # type: ignore[arg-type]
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_type_errors_name_the_python_type_that_was_passed(annotation: Any, value: Any, got: str) -> None:
    """Not the JSON type it would have been sent as: a set is not reported as an array, nor
    bytes as a string; and a set or bytes is never taken for the list or string it encodes to."""
    typed = TypedArguments.of("t", _fn(annotation), inspect.signature(_fn(annotation)))
    assert typed is not None
    with pytest.raises(TypeError, match=rf"task t: argument 'value' \(.*\): .*{got}"):
        typed.encode((value,), {})


def _fn(annotation: Any) -> Any:
    def fn(value: Any) -> None: ...

    fn.__annotations__ = {"value": annotation, "return": None}
    return fn


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (set[int], {1, 2}),
        (frozenset[int], frozenset({1})),
        (set[int] | None, {1}),
        (dict[str, Any], {"k": {1, 2}}),  # under Any a value travels as JSON can hold it
        (list[int], (1, 2)),  # a tuple keeps its order: it is a JSON array like a list
        (bytes, b"\x00\xff"),
        (bytes, bytearray(b"x")),
        (pathlib.Path, pathlib.PurePosixPath("a")),
    ],
)
def test_sets_bytes_and_paths_are_accepted_where_annotated(annotation: Any, value: Any) -> None:
    typed = TypedArguments.of("t", _fn(annotation), inspect.signature(_fn(annotation)))
    assert typed is not None
    args, _ = typed.encode((value,), {})
    body = encode_call(JSONSerializer(), args, {})
    sent, _ = decode_call(JSONSerializer(), body)
    (back,), _ = typed.decode(sent, {})
    expected = (
        {"k": [1, 2]} if isinstance(value, dict) else list(value) if isinstance(value, tuple) else value
    )
    assert back == expected


def test_a_value_that_cannot_be_encoded_is_named_with_its_parameter_path_and_type() -> None:
    app = _app()

    @app.task
    def save(doc: Doc, meta: dict[str, Any] | None = None) -> None: ...

    with pytest.raises(
        TypeError,
        match=r"task save: argument 'doc' \(Doc\): doc\.extra\['k'\]\[1\] has type Opaque, "
        "which cannot be encoded as JSON",
    ):
        save.make_call((Doc(pathlib.Path("a"), extra={"k": [1, Opaque()]}),), {}, None)
    with pytest.raises(TypeError, match=r"argument 'meta' .*: meta\['when'\] has type Opaque"):
        save.make_call((Doc(pathlib.Path("a")),), {"meta": {"when": Opaque()}}, None)
    with pytest.raises(TypeError, match=r"argument 'meta' .*: an item of meta\['ids'\] has type Opaque"):
        save.make_call((Doc(pathlib.Path("a")),), {"meta": {"ids": {Opaque()}}}, None)
    with pytest.raises(TypeError, match=r"argument 'meta' .*: meta has type Opaque"):
        save.make_call((Doc(pathlib.Path("a")),), {"meta": Opaque()}, None)


def test_recursive_dataclasses_are_typed_arguments() -> None:
    app = _app()

    @app.task
    def walk(tree: Node) -> None: ...

    tree = Node("root", [Node("a", []), Node("b", [Node("c", [])])])
    assert _roundtrip(walk, tree)[0] == (tree,)


def test_integer_dict_keys_come_back_as_ints_only_where_the_key_type_is_annotated() -> None:
    """As the documentation says: JSON keys are strings; an annotated key type converts them back."""
    app = _app()

    @app.task
    def tally(plain, loose: dict[Any, str], keyed: dict[int, str], nested: list[Counts]):  # type: ignore[no-untyped-def]
        ...

    args, _ = _roundtrip(tally, {1: "a"}, {2: "b"}, {3: "c"}, [Counts({4: 5})])
    assert args == ({"1": "a"}, {"2": "b"}, {3: "c"}, [Counts({4: 5})])
