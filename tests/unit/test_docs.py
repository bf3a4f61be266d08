"""The documentation site (docs/, mkdocs.yml) builds with ``mkdocs build --strict`` and without
the network: a broken link or anchor, a page missing from the navigation, or an API name the
reference names and the code no longer has fails the build, and so the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    assert (site / "getting-started" / "index.html").exists()
