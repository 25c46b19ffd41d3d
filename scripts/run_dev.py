#!/usr/bin/env python
"""`make run`: the console, a Celery worker and Celery beat, together, on the embedded default.

The web server (Django's runserver), one worker (solo pool: on SQLite one writer at a time is
all there is anyway) and one beat, which runs the allocation cycle every ALLOCATION_INTERVAL
seconds and the demo workload. Ctrl-C or SIGTERM stops all three; if one of them dies, the
others are stopped too and the exit status says so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 10


class Stop(Exception):
    """Raised by the SIGTERM handler so that SIGTERM ends the run like Ctrl-C does."""


def _start(name: str, argv: list[str]) -> tuple[str, subprocess.Popen[bytes]]:
    # Each child leads its own process group, so that stopping it also stops what it started
    # (runserver's autoreloader child, the worker's pool).
    return name, subprocess.Popen(argv, cwd=REPO, start_new_session=True)


def _stop(children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """SIGTERM every child's process group, wait, then SIGKILL what is still there."""
    for _, process in children:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for name, process in children:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"run_dev: {name} did not stop in {STOP_TIMEOUT_S} s: killing it", flush=True)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default="8000")
    parser.add_argument("--no-reload", action="store_true", help="runserver without the autoreloader")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_DEBUG", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    os.environ["PYTHONUNBUFFERED"] = "1"

    def on_signal(signum: int, frame: object) -> None:
        raise Stop

    # SIGINT explicitly too: a shell that starts this in the background leaves SIGINT ignored,
    # and Python then never raises KeyboardInterrupt.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    python = sys.executable
    celery = str(Path(python).with_name("celery"))
    runserver = [python, "manage.py", "runserver", f"{args.host}:{args.port}"]
    if args.no_reload:
        runserver.append("--noreload")
    children = []
    status = 0
    try:
        children.append(_start("web", runserver))
        children.append(
            _start(
                "worker",
                [celery, "-A", "gpugov_site", "worker", "-P", "solo", "--loglevel", "INFO", "-n", "dev@%h"],
            )
        )
        children.append(_start("beat", [celery, "-A", "gpugov_site", "beat", "--loglevel", "INFO"]))
        print(
            f"gpugov console: http://{args.host}:{args.port}/  (Ctrl-C stops web, worker and beat)",
            flush=True,
        )
        while True:
            for name, process in children:
                if process.poll() is not None:
                    print(
                        f"run_dev: {name} exited with status {process.returncode}; stopping the rest",
                        flush=True,
                    )
                    status = process.returncode or 1
                    raise Stop
            time.sleep(0.5)
    except (KeyboardInterrupt, Stop):
        pass
    finally:
        # A second Ctrl-C or SIGTERM must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(children)
        print("run_dev: stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
