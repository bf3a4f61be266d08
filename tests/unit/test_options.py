"""Each option is declared once: the App's keywords, app.task's options, the command-line flags
and the environment variables all come from (or are checked against) the option fields."""

from __future__ import annotations

import dataclasses
import typing

import click
import pytest

from jsworker import App
from jsworker._cli import cli
from jsworker._cli.options import flag_fields
from jsworker._config import env_name, option_fields
from jsworker._core.layout import dlq_spec
from jsworker._core.options import ALIASES, AppArguments, AppOptions
from jsworker._core.task_options import TaskArguments, TaskOptions
from jsworker._errors import ConfigurationError
from jsworker._runtime.settings import WorkerSettings
from jsworker.jetstream.connection import ConnectOptions
from jsworker.spark._options import CREDENTIAL_OPTIONS

# Flags of `jsworker run` that are about the process, not a setting of the worker or the app.
PROCESS_FLAGS = {
    "app_spec",
    "metrics_port",
    "metrics_addr",
    "loop_kind",
    "log_level",
    "log_format",
    "help",
} | {
    # The fleet's: how many processes, and when the supervisor replaces or reloads them.
    "processes",
    "max_jobs_per_process",
    "max_memory_per_process",
    "reload",
}
# ConnectOptions fields jsworker sets itself.
INTERNAL_CONNECTION_FIELDS = {"servers", "name", "inbox", "check_subjects"}


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_app_keywords_are_the_option_fields() -> None:
    """AppArguments lists exactly TaskOptions (queue as default_queue, store_result as
    results), AppOptions and the user-facing ConnectOptions fields, with the same types."""
    renamed = {field: keyword for keyword, field in ALIASES.items()}
    expected = (
        {renamed.get(name, name) for name in _names(TaskOptions)}
        | _names(AppOptions)
        | (_names(ConnectOptions) - INTERNAL_CONNECTION_FIELDS)
    )
    assert set(AppArguments.__annotations__) == expected
    hints = typing.get_type_hints(AppArguments)
    for owner in (TaskOptions, AppOptions, ConnectOptions):
        owner_hints = typing.get_type_hints(owner)
        for name, hint in owner_hints.items():
            key = renamed.get(name, name) if owner is TaskOptions else name
            if key in hints:
                assert hints[key] == hint, key


def test_task_keywords_are_the_task_option_fields() -> None:
    """app.task(...) takes every TaskOptions field, each also None (the app's default)."""
    assert set(TaskArguments.__annotations__) == _names(TaskOptions)
    hints = typing.get_type_hints(TaskArguments)
    for name, hint in typing.get_type_hints(TaskOptions).items():
        assert hints[name] == hint | None, name


def test_every_option_field_has_help() -> None:
    """Every setting a user can give is an option field, with its help."""
    for cls in (TaskOptions, AppOptions, ConnectOptions, WorkerSettings):
        internal = {"name", "inbox", "check_subjects"} if cls is ConnectOptions else set()
        assert {f.name for f in option_fields(cls)} == _names(cls) - internal, cls
        assert all(f.metadata["help"] for f in option_fields(cls)), cls


def test_run_flags_and_worker_settings_agree() -> None:
    """Every flagged WorkerSettings, AppOptions and ConnectOptions field is a `jsworker run`
    option with the field's name and default, and every other option is about the process."""
    command = cli.commands["run"]
    params = {p.name: p for p in command.params}
    for f in flag_fields(WorkerSettings):
        assert f.name in params, f.name
        assert params[f.name].default == f.default, f.name
        # An on/off flag ("--x/--no-x") keeps its "off" spelling in secondary_opts.
        spelled = set(params[f.name].opts) | set(params[f.name].secondary_opts)
        assert spelled == {o for flag in f.metadata["flag"].split() for o in flag.split("/")}
    for f in (*flag_fields(AppOptions), *flag_fields(ConnectOptions)):
        assert f.name in params, f.name
        assert params[f.name].default is None  # left out, the app's own value stands
    settings = {f.name for cls in (WorkerSettings, AppOptions, ConnectOptions) for f in flag_fields(cls)}
    assert set(params) - settings == PROCESS_FLAGS - {"help"}


def test_every_command_that_connects_has_every_connection_flag() -> None:
    wanted = {f.name for f in flag_fields(ConnectOptions)}

    def commands(group: click.Group) -> typing.Iterator[click.Command]:
        for command in group.commands.values():
            if isinstance(command, click.Group):
                yield from commands(command)
            else:
                yield command

    for command in commands(cli):
        names = {p.name for p in command.params}
        if names & wanted:
            assert wanted <= names, command.name


def test_spark_credential_options_follow_the_flags() -> None:
    assert CREDENTIAL_OPTIONS == {
        "user": "user",
        "password": "password",
        "token": "token",
        "creds": "credentials",
        "nkey_seed": "nkey_seed",
        "tls_ca": "tls_ca",
        "tls_cert": "tls_cert",
        "tls_key": "tls_key",
        "inbox_prefix": "inbox_prefix",
    }


def test_app_keywords_land_in_their_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JSWORKER_TOKEN", "from-env")
    app = App(
        "opts",
        "nats://a:4222,nats://b:4222",
        default_queue="mail",
        max_retries=5,
        duplicate_window=60,
        replicas=3,
        user="u",
        password="p",
        connect_timeout=1.5,
    )
    assert app.defaults.queue == "mail" and app.defaults.max_retries == 5
    assert app.options.duplicate_window == 60.0 and app.options.replicas == 3
    assert app.connection.user == "u" and app.connection.password == "p"
    assert app.connection.token == "from-env"  # not given: JSWORKER_TOKEN
    assert app.connection.connect_timeout == 1.5
    assert app.servers == ["nats://a:4222", "nats://b:4222"]


def test_objects_and_keywords_combine_keywords_winning() -> None:
    app = App(
        "opts",
        task_defaults=TaskOptions(max_retries=7, timeout=5.0),
        options=AppOptions(replicas=3),
        connection=ConnectOptions(user="obj"),
        timeout=9.0,
    )
    assert (app.defaults.max_retries, app.defaults.timeout) == (7, 9.0)
    assert app.options.replicas == 3
    assert app.connection.user == "obj"


def test_unknown_or_bad_keywords_fail_at_once() -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        App("opts", no_such_option=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="queue"):
        App("opts", queue="q")  # type: ignore[call-arg]
    with pytest.raises(Exception, match="replicas"):
        App("opts", replicas=0)
    app = App("opts")
    with pytest.raises(TypeError, match="retries"):
        app.task(retries=3)  # type: ignore[call-overload]


def test_environment_variables_are_the_documented_ones() -> None:
    names = {env_name(f) for f in option_fields(ConnectOptions)} - {None}
    assert names == {
        "JSWORKER_URL",
        "JSWORKER_USER",
        "JSWORKER_PASSWORD",
        "JSWORKER_TOKEN",
        "JSWORKER_CREDS",
        "JSWORKER_NKEY_SEED",
        "JSWORKER_TLS_CA",
        "JSWORKER_TLS_CERT",
        "JSWORKER_TLS_KEY",
        "JSWORKER_INBOX_PREFIX",
        "JSWORKER_CONNECT_TIMEOUT",
    }


def test_connect_timeout_falls_back_to_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment whose server starts after its workers sets how long they wait for it."""
    monkeypatch.setenv("JSWORKER_CONNECT_TIMEOUT", "30")
    assert App("opts").connection.connect_timeout == 30.0
    assert App("opts", connect_timeout=2).connection.connect_timeout == 2.0
    monkeypatch.setenv("JSWORKER_CONNECT_TIMEOUT", "soon")
    with pytest.raises(Exception, match="connect_timeout"):
        App("opts")


def test_stream_options_fall_back_to_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deployments set replicas and stream limits without touching code; a keyword or a whole
    options object wins over the variable."""
    monkeypatch.setenv("JSWORKER_REPLICAS", "3")
    monkeypatch.setenv("JSWORKER_DLQ_MAX_BYTES", "512MB")
    monkeypatch.setenv("JSWORKER_EVENTS_MAX_BYTES", "-1")
    monkeypatch.setenv("JSWORKER_DLQ_MAX_AGE", "3600")
    monkeypatch.setenv("JSWORKER_EVENTS_MAX_AGE", "1.5")
    options = App("opts").options
    assert options.replicas == 3
    assert options.dlq_max_bytes == 512 << 20 and options.events_max_bytes == -1
    assert options.dlq_max_age == 3600.0 and options.events_max_age == 1.5
    assert App("opts", replicas=1).options.replicas == 1
    assert App("opts", options=AppOptions(replicas=5)).options.replicas == 5
    spec = dlq_spec(App("opts"))
    assert (spec.replicas, spec.max_bytes, spec.max_age) == (3, 512 << 20, 3600.0)


@pytest.mark.parametrize(
    ("given", "size"),
    [(1024, 1024), ("1024", 1024), ("2K", 2048), ("1GiB", 1 << 30), ("3gb", 3 << 30), (" 7 MB ", 7 << 20),
     ("1T", 1 << 40), ("10Gi", 10 << 30), (-1, -1), ("-1", -1)],
)  # fmt: skip
def test_sizes_read_as_nats_server_reads_them(given: object, size: int) -> None:
    assert AppOptions(dlq_max_bytes=given).dlq_max_bytes == size  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -2, "ten", "1 PB", "1.5GB", True, None])
def test_bad_sizes_fail_with_the_option_named(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="events_max_bytes"):
        AppOptions(events_max_bytes=bad)  # type: ignore[arg-type]


def test_bad_variables_fail_with_the_option_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JSWORKER_REPLICAS", "three")
    with pytest.raises(ConfigurationError, match="replicas must be an int, not 'three'"):
        App("opts")
    monkeypatch.setenv("JSWORKER_REPLICAS", "0")
    with pytest.raises(ConfigurationError, match="replicas must be an int >= 1"):
        App("opts")
