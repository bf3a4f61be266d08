"""The documentation site (docs/, mkdocs.yml) builds with ``mkdocs build --strict`` and without
the network: a broken link or anchor, a page missing from the navigation, or an API name the
reference names and the code no longer has fails the build, and so the suite."""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from jsworker._cli import cli

ROOT = Path(__file__).parents[2]


def test_the_site_builds_strictly_offline(tmp_path: Path) -> None:
    site = tmp_path / "site"
    # Any fetch goes to a closed port and fails, which --strict turns into a failed build.
    closed = "http://127.0.0.1:9"
    env = {**os.environ, "HTTP_PROXY": closed, "HTTPS_PROXY": closed, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("NO_PROXY", None)
    built = subprocess.run(
        # Not --quiet, which hides the warnings --strict counts.
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    # The references come from the code: a public method's docstring, every command.
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "set_queue_limits" in api and "Change <code>queue</code>" in api
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert all(f"jsworker {command}" in cli for command in ("run", "enqueue", "doctor", "queues limits"))
    # The docstrings' reST roles show as their code (docs/hooks.py), not as ":class:Job".
    assert re.search(r":(meth|class|func|attr|exc|data|mod):<code>", api) is None
    assert "<code>JobFailed</code>" in api
    assert "Sentinel" not in cli
    assert (site / "getting-started" / "index.html").exists()


DOCS = ROOT / "docs"
# An info string is a language (```python) or attributes (```{.python title="..."}).
_FENCE = re.compile(r"^```\{?\.?(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_RUN_BY = re.compile(r"<!-- run by (\S+) -->")
_INCLUDE = re.compile(r'--8<-- "([^"]+\.md)"')


def _blocks() -> Iterator[tuple[str, str, str, str]]:
    """Every fenced block of the docs: (where, language, its text, the line before it). A
    page that is another file's Markdown (``--8<-- "deploy/README.md"``) is read as that file."""
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        if (included := _INCLUDE.fullmatch(text.strip())) is not None:
            page = ROOT / included[1]
            text = page.read_text(encoding="utf-8")
        for found in _FENCE.finditer(text):
            before = [line for line in text[: found.start()].splitlines() if line.strip()]
            line = text[: found.start()].count("\n") + 1
            yield f"{page.relative_to(ROOT)}:{line}", found[1], found[2], before[-1] if before else ""


def _imported_names(tree: ast.AST) -> Iterator[tuple[str, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "jsworker":
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "jsworker":
                    yield alias.name, ""


def test_every_python_block_is_run_by_a_test_or_a_fragment_that_compiles_against_the_api() -> None:
    """A Python block in the docs is one of: code included from examples/ (which tests run),
    a page's code a test runs (``<!-- run by tests/... -->`` before it, naming a test that reads
    that page), or a fragment (``<!-- fragment -->``), which must compile (top-level ``await``
    allowed) and import from jsworker only names that exist."""
    problems: list[str] = []
    for where, language, code, before in _blocks():
        if language != "python":
            continue
        if code.startswith("--8<--"):
            included = ROOT / code.split('"')[1]
            if not included.is_relative_to(ROOT / "examples"):
                problems.append(f"{where}: includes {included.name}, not an example the tests run")
            continue
        run_by = _RUN_BY.fullmatch(before)
        if run_by is not None:
            test = ROOT / run_by[1]
            page = where.split(":")[0].split("/")[-1]
            if not test.is_file() or page not in test.read_text(encoding="utf-8"):
                problems.append(f"{where}: {run_by[1]} does not read {page}")
            continue
        if before != "<!-- fragment -->":
            problems.append(f"{where}: neither run by a test nor marked <!-- fragment -->")
            continue
        try:
            tree = compile(code, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as exc:
            problems.append(f"{where}: {exc}")
            continue
        for module, name in _imported_names(tree):
            try:
                imported = importlib.import_module(module)
            except ImportError as exc:
                problems.append(f"{where}: {exc}")
                continue
            if name and not hasattr(imported, name):
                problems.append(f"{where}: {module} has no {name}")
    assert problems == []


def _commands() -> Iterator[tuple[str, str]]:
    """Every ``jsworker ...`` command the docs and the README show: in inline code, and on
    the command lines of console and shell blocks."""
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for found in re.finditer(r"`(jsworker [a-z][^`]*)`", text):
            yield str(page.relative_to(ROOT)), found[1]
    for where, language, code, _ in _blocks():
        if language in ("console", "bash", "sh"):
            for line in re.sub(r"\\\n\s*", " ", code).splitlines():  # continued lines joined
                if line.startswith("$ ") or language != "console":
                    yield where, line.removeprefix("$ ")


def _command_problem(line: str) -> str | None:
    """What is wrong with one shown command line (None: its commands and options exist).
    Placeholders are fine: only command and option names are checked."""
    line = re.sub(r"\[[^\]]*\]", " ", line.split(" #")[0])  # optional parts, comments
    tokens = shlex.split(line)
    if "jsworker" not in tokens:
        return None  # pip install 'jsworker[...]', and the like
    args = tokens[tokens.index("jsworker") + 1 :]
    command: click.Command = cli
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        names, args = args[0].split("/"), args[1:]
        found = [command.get_command(click.Context(command), name) for name in names]
        if None in found:
            return f"no command {'/'.join(names)} in {command.name}"
        command = found[0]  # type: ignore[assignment]
    options = {"--help", "-h"} | {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    unknown = [a.split("=")[0] for a in args if a.startswith("-") and a.split("=")[0] not in options]
    return f"{command.name} has no option {', '.join(unknown)}" if unknown else None


def test_every_command_the_docs_show_exists_with_its_options() -> None:
    problems = [
        f"{where}: `{line}`: {problem}" for where, line in _commands() if (problem := _command_problem(line))
    ]
    assert problems == []


def test_the_shell_completion_the_cli_reference_documents_completes_commands() -> None:
    """``_JSWORKER_COMPLETE=bash_source jsworker`` (docs/reference/cli.md) gives bash a
    completion function, and what it asks for completes a command's name."""
    jsworker = [sys.executable, "-m", "jsworker"]
    documented = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    assert "_JSWORKER_COMPLETE=bash_source jsworker" in documented

    def run(**env: str) -> str:
        done = subprocess.run(
            jsworker, env={**os.environ, **env}, capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout

    source = run(_JSWORKER_COMPLETE="bash_source")
    assert "_jsworker_completion()" in source
    assert (
        run(_JSWORKER_COMPLETE="bash_complete", COMP_WORDS="jsworker qu", COMP_CWORD="1") == "plain,queues\n"
    )
