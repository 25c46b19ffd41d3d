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
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 10
POLL_S = 0.5


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


def console_url(host: str, port: str) -> str:
    """The URL a browser on this machine opens: a wildcard listen address is not one."""
    shown = "127.0.0.1" if host in {"0.0.0.0", "", "::", "[::]"} else host
    return f"http://{shown}:{port}/"


def child_environment(host: str, port: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of web, worker and beat: DEBUG on, and links in emails (the weekly
    reports the worker sends) to the port served here unless GPUGOV_BASE_URL says otherwise."""
    env = dict(environ)
    env.setdefault("DJANGO_DEBUG", "1")
    env.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    env.setdefault("GPUGOV_BASE_URL", console_url(host, port).rstrip("/"))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_until_answers(url: str, children: list[tuple[str, subprocess.Popen[bytes]]]) -> bool:
    """Poll ``url`` until the server answers (any HTTP status); False if a child exits first.

    The web server takes from a second to tens of seconds to start on a busy machine (Django's
    checks, the autoreloader), so the URL is printed once it answers, not after a guess."""
    while True:
        if any(process.poll() is not None for _, process in children):
            return False
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # an error page is an answer too
        except (OSError, urllib.error.URLError):
            time.sleep(POLL_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default="8000")
    parser.add_argument("--no-reload", action="store_true", help="runserver without the autoreloader")
    args = parser.parse_args()
    os.environ.update(child_environment(args.host, args.port, os.environ))
    url = console_url(args.host, args.port)

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
            f"run_dev: started web, worker and beat; waiting for the console to answer at {url}", flush=True
        )
        if wait_until_answers(url, children):
            print(f"gpugov console: {url}  (Ctrl-C stops web, worker and beat)", flush=True)
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
