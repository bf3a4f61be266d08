"""examples/typed_tasks passes ``mypy --strict``, and a wrong argument to a task's ``.delay`` is
a type error there: the task keeps its parameters' types through the decorator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "typed_tasks"


def _mypy(*paths: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # From the example's directory, where its modules import each other as a user's would.
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *paths],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_the_typed_example_is_clean_under_mypy_strict() -> None:
    """Clean, with run.py's deliberately wrong call silenced by an ignore that strict mode
    would report as unused were the call not an error."""
    checked = _mypy(".", cwd=EXAMPLE)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "no issues found in 2 source files" in checked.stdout


def test_a_wrong_argument_to_delay_is_a_type_error(tmp_path: Path) -> None:
    (tmp_path / "billing.py").write_text((EXAMPLE / "billing.py").read_text())
    (tmp_path / "caller.py").write_text(
        "from datetime import date\n"
        "from billing import amount_due\n"
        "amount_due.delay([], date.today())\n"  # right
        'amount_due.delay([], "2026-12-31")\n'  # a str for a date
        "amount_due.delay(date.today())\n"  # an argument missing
        "async def later() -> None:\n"
        "    await amount_due.adelay(invoices=[], as_of=1)\n"  # an int for a date, by name
    )
    checked = _mypy("caller.py", cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert sorted({line.split(":")[1] for line in errors}) == ["4", "5", "7"], checked.stdout
    assert '"str"; expected "date"' in errors[0]
