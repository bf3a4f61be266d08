"""Declaring tasks on an App, calling them inline, and checking calls before any enqueue."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from jsworker import App, Task, current_job
from jsworker._core.layout import consumer_spec
from jsworker._errors import ConfigurationError, EnqueueError, JsworkerError, SerializationError

UNREACHABLE = "nats://127.0.0.1:1"


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> App:
    """An app pointed at a port nothing listens on; enqueues must never get that far here."""
    a = App("unit", UNREACHABLE, max_retries=5, timeout=7.0, ack_wait=20.0, retry_backoff=2.0)

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the producer was reached")

    monkeypatch.setattr(a.bridge, "run_sync", no_network)
    monkeypatch.setattr(a.producer, "send", no_network)
    monkeypatch.setattr(a.producer, "send_many", no_network)
    return a


def test_bare_decorator_registers_with_app_defaults(app: App) -> None:
    """@app.task registers under the function name with the app's defaults."""

    @app.task
    def send_email(to: str) -> str:
        """Send it."""
        return to

    assert isinstance(send_email, Task)
    assert app.tasks == {"send_email": send_email}
    assert send_email.name == "send_email"
    assert send_email.queue == "default"
    assert send_email.options == app.defaults
    assert send_email.options.max_retries == 5
    assert send_email.options.timeout == 7.0
    assert send_email.__doc__ == "Send it."


def test_decorator_with_options_overrides_defaults(app: App) -> None:
    """Options given to @app.task win; the rest still come from the app."""

    @app.task(queue="emails", name="send-v2", max_retries=0, timeout=1.5, ack_wait=90)
    def send(to: str) -> None:
        pass

    assert app.tasks["send-v2"] is send
    assert "send" not in app.tasks
    o = send.options
    assert (o.queue, o.max_retries, o.timeout, o.ack_wait) == ("emails", 0, 1.5, 90.0)
    assert o.retry_backoff == 2.0
    assert o.retry_backoff_max == app.defaults.retry_backoff_max


def test_app_default_queue_is_used(app: App) -> None:
    """Tasks without a queue go to the app's default_queue."""
    other = App("unit2", UNREACHABLE, default_queue="main")

    @other.task
    def f() -> None:
        pass

    assert f.queue == "main"


@pytest.mark.parametrize(
    "options",
    [{"name": "bad.name"}, {"name": "has space"}, {"queue": "q>"}, {"queue": "*"}, {"queue": ""}],
)
def test_invalid_names_fail_at_decoration(app: App, options: dict[str, Any]) -> None:
    """A bad task or queue name raises ConfigurationError when the decorator runs."""
    with pytest.raises(ConfigurationError):

        @app.task(**options)
        def f() -> None:
            pass

    assert app.tasks == {}


def test_function_name_is_validated_too(app: App) -> None:
    """A function whose own name is not a valid task name is refused without name=..."""

    def f() -> None:
        pass

    f.__name__ = "weird.name"
    with pytest.raises(ConfigurationError):
        app.task(f)


@pytest.mark.parametrize(
    "options",
    [{"max_retries": -1}, {"timeout": 0}, {"timeout": -1}, {"ack_wait": 0}, {"retry_backoff": -0.5}],
)
def test_invalid_option_values_fail_at_decoration(app: App, options: dict[str, Any]) -> None:
    """Negative or zero numeric options raise ConfigurationError."""
    with pytest.raises(ConfigurationError):

        @app.task(**options)
        def f() -> None:
            pass


@pytest.mark.parametrize(
    "options",
    [{"name": "a.b"}, {"default_queue": "x y"}, {"max_retries": -1}, {"ack_wait": 0}, {"timeout": -2}],
)
def test_invalid_app_arguments_raise(options: dict[str, Any]) -> None:
    """App refuses bad names and bad defaults with ConfigurationError."""
    kwargs = {"name": "ok", **options}
    with pytest.raises(ConfigurationError):
        App(servers=UNREACHABLE, **kwargs)


@pytest.mark.parametrize("option", ["ack_wait", "timeout", "max_retries"])
def test_nan_option_values_are_refused(option: str) -> None:
    """NaN is not a valid number of seconds or retries."""
    options: dict[str, Any] = {option: float("nan")}
    with pytest.raises(ConfigurationError):
        App("ok", UNREACHABLE, **options)


def test_servers_string_is_split_on_commas() -> None:
    """A comma-separated servers string becomes a list of URLs."""
    a = App("ok", " nats://a:1 , nats://b:2,, ")
    assert a.servers == ["nats://a:1", "nats://b:2"]


def test_duplicate_name_with_another_function_raises(app: App) -> None:
    """Two different functions cannot share a task name."""

    @app.task(name="job")
    def first() -> None:
        pass

    with pytest.raises(ConfigurationError, match="already has a task named 'job'"):

        @app.task(name="job")
        def second() -> None:
            pass

    assert app.tasks["job"].fn is first.fn


def test_registering_the_same_function_twice_is_allowed(app: App) -> None:
    """Re-registering the very same function under its name is not a conflict."""

    def f() -> None:
        pass

    app.task(f)
    again = app.task(f)
    assert app.tasks["f"] is again


def test_calling_a_sync_task_runs_it_inline(app: App) -> None:
    """Calling the task object calls the function and returns its result."""
    calls: list[tuple[int, int]] = []

    @app.task
    def add(a: int, b: int = 1) -> int:
        calls.append((a, b))
        return a + b

    assert add(2, b=3) == 5
    assert calls == [(2, 3)]
    assert add.is_async is False


@pytest.mark.anyio
async def test_calling_an_async_task_returns_its_coroutine(app: App) -> None:
    """Calling an async task gives the coroutine, which runs the function when awaited."""

    @app.task
    async def double(x: int) -> int:
        await anyio.lowlevel.checkpoint()
        return x * 2

    assert double.is_async is True
    assert await double(21) == 42


def test_queues_lists_each_used_queue_once_sorted(app: App) -> None:
    """app.queues is the sorted set of queues that have tasks."""
    assert app.queues == []

    @app.task(queue="zeta")
    def a() -> None:
        pass

    @app.task(queue="alpha")
    def b() -> None:
        pass

    @app.task(queue="zeta")
    def c() -> None:
        pass

    @app.task
    def d() -> None:
        pass

    assert app.queues == ["alpha", "default", "zeta"]


def test_queue_ack_wait_is_the_largest_of_the_queues_tasks(app: App) -> None:
    """A queue's consumer ack_wait is the max of its tasks', other queues not counted."""

    @app.task(queue="q", ack_wait=10)
    def a() -> None:
        pass

    @app.task(queue="q", ack_wait=60)
    def b() -> None:
        pass

    @app.task(queue="q")
    def c() -> None:  # app default: 20
        pass

    @app.task(queue="other", ack_wait=300)
    def d() -> None:
        pass

    assert app.queue_ack_wait("q") == 60.0
    assert app.queue_ack_wait("other") == 300.0
    assert app.queue_ack_wait("unused") == app.defaults.ack_wait == 20.0
    assert consumer_spec(app, "q").ack_wait == 60.0


def test_check_arguments_accepts_fitting_calls(app: App) -> None:
    """Arguments that bind to the signature pass silently."""

    @app.task
    def f(a: int, b: int = 0, *, c: str = "") -> None:
        pass

    f.check_arguments([1], {})
    f.check_arguments([1, 2], {"c": "x"})
    f.check_arguments([], {"a": 1})


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [([], {}), ([1, 2, 3], {}), ([1], {"nope": 1}), ([1], {"a": 2}), ([1, 2, 3, 4], {})],
)
def test_check_arguments_raises_type_error_naming_the_task(
    app: App, args: list[Any], kwargs: dict[str, Any]
) -> None:
    """Arguments that do not bind raise TypeError mentioning the task."""

    @app.task
    def f(a: int, b: int = 0, *, c: str = "") -> None:
        pass

    with pytest.raises(TypeError, match="task f:"):
        f.check_arguments(args, kwargs)


def test_delay_with_wrong_arguments_raises_before_network(app: App) -> None:
    """.delay/.apply with arguments that do not fit raise TypeError without enqueueing."""

    @app.task
    def f(x: int) -> None:
        pass

    with pytest.raises(TypeError, match="task f"):
        f.delay()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="task f"):
        f.delay(1, 2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="task f"):
        f.delay(y=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="task f"):
        f.apply((), {"y": 1})


@pytest.mark.anyio
async def test_adelay_with_wrong_arguments_raises_before_network(app: App) -> None:
    """The async producers check arguments before any connection is opened."""

    @app.task
    def f(x: int) -> None:
        pass

    with pytest.raises(TypeError, match="task f"):
        await f.adelay()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="task f"):
        await f.aapply((1, 2))
    with pytest.raises(TypeError, match="task f"):
        await f.adelay_many([(1,), (1, 2)])


@pytest.mark.parametrize("item", [[1], "abc", 1, None, {1}])
def test_bulk_items_must_be_tuple_or_dict(app: App, item: Any) -> None:
    """delay_many refuses items that are neither a tuple nor a dict, naming the type."""

    @app.task
    def f(x: Any = None) -> None:
        pass

    with pytest.raises(TypeError, match=f"not {type(item).__name__}"):
        f.delay_many([(1,), item])


def test_bulk_items_tuple_and_dict_become_calls(app: App) -> None:
    """A tuple item is positional arguments and a dict item keyword arguments; ids are unique."""

    @app.task
    def f(x: int, y: int = 0) -> None:
        pass

    calls = f._calls([(1,), {"x": 2, "y": 3}])
    assert [(c.args, c.kwargs) for c in calls] == [((1,), {}), ((), {"x": 2, "y": 3})]
    assert calls[0].job_id != calls[1].job_id


def test_call_generates_job_id_when_none_given(app: App) -> None:
    """Without job_id a random 32-hex-character id is made."""

    @app.task
    def f(x: int) -> None:
        pass

    call = f.make_call((1,), None, None)
    assert call.args == (1,)
    assert call.kwargs == {}
    assert len(call.job_id) == 32
    int(call.job_id, 16)
    assert f.make_call((1,), None, None).job_id != call.job_id


@pytest.mark.parametrize("job_id", ["order-42", "x" * 128, "a", "b64_Zm9v=="])
def test_call_keeps_a_valid_job_id(app: App, job_id: str) -> None:
    """A job id of 1-128 letters, digits, '_', '-' or '=' is used as given."""

    @app.task
    def f(x: int) -> None:
        pass

    assert f.make_call((1,), None, job_id).job_id == job_id


@pytest.mark.parametrize("job_id", ["", "x" * 129, 42, b"bytes", "a.b", "a b", "a:b", "a*", "a>", "é"])
def test_call_rejects_bad_job_ids(app: App, job_id: Any) -> None:
    """Empty, over-long or non-string job ids raise ConfigurationError."""

    @app.task
    def f(x: int) -> None:
        pass

    with pytest.raises(ConfigurationError, match="job_id"):
        f.make_call((1,), None, job_id)
    with pytest.raises(ConfigurationError, match="job_id"):
        f.apply((1,), job_id=job_id)


def test_current_job_outside_a_job_raises() -> None:
    """current_job() outside a worker-run task raises JsworkerError."""
    with pytest.raises(JsworkerError, match="outside a job"):
        current_job()


@pytest.mark.anyio
async def test_enqueue_without_a_server_raises_enqueue_error() -> None:
    """With no server listening, adelay raises EnqueueError instead of hanging."""
    a = App("unit", UNREACHABLE, connect_timeout=0.5)

    @a.task
    def f(x: int) -> None:
        pass

    try:
        with anyio.fail_after(3):
            with pytest.raises(EnqueueError):
                await f.adelay(1)
    finally:
        with anyio.move_on_after(1):
            await a.aclose()


def test_retry_on_and_dont_retry_on_classify_exceptions() -> None:
    """retry_on selects what retries; dont_retry_on wins over it; app defaults are inherited."""
    app = App("ok", UNREACHABLE, dont_retry_on=(KeyError,))

    @app.task(retry_on=(ConnectionError, LookupError))
    def fetch() -> None: ...

    @app.task
    def other() -> None: ...

    assert fetch.options.is_retryable(ConnectionResetError())
    assert not fetch.options.is_retryable(KeyError("k"))  # a LookupError, but listed in dont_retry_on
    assert fetch.options.is_retryable(IndexError())
    assert not fetch.options.is_retryable(ValueError())
    assert other.options.is_retryable(ValueError())
    assert not other.options.is_retryable(KeyError())


def test_retry_on_must_be_exception_classes() -> None:
    """A typo such as retry_on=("KeyError",) fails at declaration."""
    app = App("ok", UNREACHABLE)
    with pytest.raises(ConfigurationError, match="retry_on"):

        @app.task(retry_on=("KeyError",))  # type: ignore[arg-type]
        def f() -> None: ...


def test_an_argument_that_cannot_be_encoded_is_named_by_its_parameter() -> None:
    """Without annotations nothing checks the values before encoding: the encoding error
    still names the parameter, not only its position."""
    app = App("named")

    @app.task
    def save(doc, n):  # type: ignore[no-untyped-def]  # unannotated on purpose
        ...

    with pytest.raises(SerializationError, match="argument 'doc' has type set"):
        app.producer.message(save, save.make_call(({1, 2}, 3), None, None))
