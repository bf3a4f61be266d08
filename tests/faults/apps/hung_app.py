"""An app whose worker processes cannot exit once they have stopped, as one holding a process
pool did: its worker logged ``worker.stopped`` and then never ended.

In a worker process (``JSW_TEST_HANG=1`` in its environment; never in the test's own process,
which imports this module to send jobs), importing the module starts two child processes that
sleep, one in the worker's process group and one in a session of its own, and a non-daemon
thread that waits for them: the interpreter's exit waits for that thread, forever. Each child
is written to the record file as ``child <worker pid> <child pid>`` (three fields: skipped by
``parse_execution``); its command line ends with :data:`MARKER`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from jsworker import App
from jsworker.testing import append_record
from jsworker.testing import record_execution as record

app = App("hng", ack_wait=2)

#: The last argument of every child's command line: how the test knows a pid is still one.
MARKER = "jsw-hung-app-child"
# Longer than any test runs: a child nobody kills still ends by itself.
_CHILD_LIFETIME = 300


def _hold() -> None:
    sleeper = [sys.executable, "-c", f"import time; time.sleep({_CHILD_LIFETIME})", MARKER]
    children = [
        subprocess.Popen(sleeper, stdin=subprocess.DEVNULL),
        subprocess.Popen(sleeper, stdin=subprocess.DEVNULL, start_new_session=True),
    ]
    for child in children:
        append_record(f"child {os.getpid()} {child.pid}\n")
    threading.Thread(target=lambda: [c.wait() for c in children], name="hung-app-holder").start()


if os.environ.get("JSW_TEST_HANG") == "1":
    _hold()


@app.task()
async def work(n: int) -> int:
    record("done")
    return n
