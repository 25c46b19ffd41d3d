"""``make run`` (scripts/run_dev.py): the console's URL is printed once the server answers, and
links in emails follow the port it serves on unless GPUGOV_BASE_URL is set."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO


def _run_dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_dev", REPO / "scripts" / "run_dev.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _environ(tmp_path: Path) -> dict[str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "GPUGOV_BASE_URL", "DATABASE_URL"))
    }
    environ.pop("REDIS_URL", None)
    environ["GPUGOV_VAR_DIR"] = str(tmp_path)
    return environ


def _email_link(env: dict[str, str]) -> str:
    show = "from allocations.reports.email import _absolute; print(_absolute('/teams/team-a/'))"
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", show],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_links_in_emails_follow_the_port_make_run_serves_on(tmp_path: Path) -> None:
    env = _run_dev().child_environment("127.0.0.1", "8411", _environ(tmp_path))
    assert _email_link(env) == "http://127.0.0.1:8411/teams/team-a/"


def test_a_base_url_that_is_set_wins_over_the_port(tmp_path: Path) -> None:
    environ = {**_environ(tmp_path), "GPUGOV_BASE_URL": "https://gpugov.example.org"}
    env = _run_dev().child_environment("0.0.0.0", "8411", environ)
    assert _email_link(env) == "https://gpugov.example.org/teams/team-a/"


def test_a_wildcard_listen_address_is_shown_as_the_loopback_address() -> None:
    assert _run_dev().console_url("0.0.0.0", "8411") == "http://127.0.0.1:8411/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Long: starts the real web server, Celery worker and beat, which take seconds to come up.
def test_the_url_is_printed_once_the_console_answers(tmp_path: Path) -> None:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "scripts/run_dev.py", "--port", str(port), "--no-reload"],
        cwd=REPO,
        env=_environ(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("gpugov console:"):
                break
        else:
            raise AssertionError(f"run_dev ended without printing the URL: {lines}")
        assert lines[0].startswith("run_dev: started web, worker and beat; waiting for the console")
        url = line.split()[2]
        assert url == f"http://127.0.0.1:{port}/"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert 200 <= status < 600  # it answers at once: no connection refused
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)
