"""Load: simulated users browse queues and dashboards, submit and cancel jobs, against gunicorn.

    .venv/bin/python benchmarks/load.py [--users 50] [--duration 60] [--workers 3] [--think 0.5]

The script makes everything it needs and removes it afterwards: a fresh PostgreSQL database
``gpugov_load`` on 127.0.0.1 (``--db-url``; dropped at the end), migrated and loaded with the demo
cluster (``load_demo``), its static files collected into a temporary directory, and gunicorn
(``gpugov_site.wsgi``, the base settings, ``--workers``) on a free loopback port. Each simulated
user is one thread with its own session: it signs in through the login form, then until the
time is up picks an action (weights below), waits ``--think`` seconds on average and goes on.
Members submit a job and later cancel it; every request counts, whatever its page.

Printed: requests, requests per second, p50/p95/p99 latency and errors per page (an error is a
5xx, a connection failure, or a status other than the page's expected one), and two baselines
measured in the same run, beside the pages and under the same load: a static file (WhiteNoise,
no Django view) and the anonymous login page (a view, no database query but the session). The
target is 0 errors. No Celery worker runs, so submitted jobs stay pending (the cycle requests
wait in a broker directory that is removed at the end): this measures the web tier.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode, urlsplit

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# Set on the demo users of the throw-away database; made per run, written nowhere.
PASSWORD = secrets.token_urlsafe(12)

# (action, weight): what a user does next.
ACTIONS = [
    ("team queue", 25),
    ("queue live fragment", 20),
    ("job page", 10),
    ("team dashboard", 8),
    ("team dashboard data", 8),
    ("my teams", 5),
    ("api jobs list", 8),
    ("submit job", 8),
    ("cancel job", 6),
    ("baseline static file", 4),
    ("baseline login page", 4),
]


@dataclass
class Stats:
    """Latencies (seconds) and errors per page, shared by every user thread."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, page: str, seconds: float, error: str | None) -> None:
        with self.lock:
            self.latencies[page].append(seconds)
            if error:
                self.errors[page].append(error)


class Session:
    """One user's HTTP session: cookies kept, no redirect followed, a new connection per request
    (gunicorn's sync workers close it after each response anyway)."""

    def __init__(self, host: str, port: int, stats: Stats) -> None:
        self.host, self.port, self.stats = host, port, stats
        self.cookies: dict[str, str] = {}

    def request(
        self,
        page: str,
        method: str,
        path: str,
        body: dict[str, str] | None = None,
        expect: tuple[int, ...] = (200,),
    ) -> tuple[int, dict[str, str], str]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        data = None
        if body is not None:
            data = urlencode(body)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["Referer"] = f"http://{self.host}:{self.port}{path}"
            if "csrftoken" in self.cookies:
                headers["X-CSRFToken"] = self.cookies["csrftoken"]
        started = time.perf_counter()
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
            status = response.status
            response_headers = {k.lower(): v for k, v in response.getheaders()}
            for value in response.msg.get_all("Set-Cookie") or []:
                cookie = SimpleCookie(value)
                for key, morsel in cookie.items():
                    self.cookies[key] = morsel.value
            conn.close()
        except OSError as exc:
            self.stats.add(page, time.perf_counter() - started, f"{method} {path}: {exc}")
            return 0, {}, ""
        elapsed = time.perf_counter() - started
        error = None if status in expect else f"{method} {path}: {status}"
        self.stats.add(page, elapsed, error)
        return status, response_headers, text

    def login(self, username: str) -> bool:
        _, _, html = self.request("sign in (form)", "GET", "/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        status, _, _ = self.request(
            "sign in",
            "POST",
            "/accounts/login/",
            {
                "username": username,
                "password": PASSWORD,
                "csrfmiddlewaretoken": token.group(1) if token else "",
            },
            expect=(302,),
        )
        return status == 302


def user_loop(
    session: Session, user: dict[str, str], deadline: float, think: float, static_path: str
) -> None:
    """One simulated user: sign in, then act until the deadline."""
    rng = random.Random(user["username"])
    if not session.login(user["username"]):
        return
    team = user["team"]
    my_jobs: list[int] = []
    seen_jobs: list[int] = []
    names, weights = zip(*ACTIONS, strict=True)
    while time.monotonic() < deadline:
        action = rng.choices(names, weights)[0]
        if action == "team queue":
            _, _, html = session.request(action, "GET", f"/teams/{team}/")
            seen_jobs = [int(pk) for pk in re.findall(r'href="/jobs/(\d+)/"', html)][:20] or seen_jobs
        elif action == "queue live fragment":
            session.request(action, "GET", f"/teams/{team}/live/")
        elif action == "job page" and seen_jobs:
            session.request(action, "GET", f"/jobs/{rng.choice(seen_jobs)}/")
        elif action == "team dashboard":
            session.request(action, "GET", f"/dashboards/teams/{team}/")
        elif action == "team dashboard data":
            session.request(action, "GET", f"/dashboards/teams/{team}/data.json?range=1d")
        elif action == "my teams":
            session.request(action, "GET", "/my-teams/")
        elif action == "api jobs list":
            session.request(action, "GET", f"/api/v1/jobs/?team={team}&state=pending")
        elif action == "submit job":
            body = {
                "name": f"load-{rng.randrange(10**6)}",
                "instance_type": user["instance_type"],
                "gpus": str(rng.choice([1, 2, 4])),
                "priority_class": user["priority_class"],
                "command": "python train.py",
                "requested_duration": "3600",
            }
            status, headers, _ = session.request(
                action, "POST", f"/teams/{team}/submit/", body, expect=(302,)
            )
            match = re.search(r"/jobs/(\d+)/", headers.get("location", "")) if status == 302 else None
            if match:
                my_jobs.append(int(match.group(1)))
        elif action == "cancel job" and my_jobs:
            pk = my_jobs.pop(rng.randrange(len(my_jobs)))
            session.request(action, "POST", f"/jobs/{pk}/cancel/", {}, expect=(302,))
        elif action == "baseline static file":
            session.request(action, "GET", static_path)
        elif action == "baseline login page":
            Session(session.host, session.port, session.stats).request(action, "GET", "/accounts/login/")
        else:
            continue
        time.sleep(rng.expovariate(1 / think) if think > 0 else 0)


# --- Set-up and tear-down ---------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manage(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


PREPARE_USERS = """
import json
from django.contrib.auth import get_user_model
from allocations.models import Membership, PriorityClass, TeamQuota
users = []
pc = PriorityClass.objects.order_by("weight").first().name
for m in Membership.objects.filter(role="member").select_related("user", "team"):
    m.user.set_password(PASSWORD)
    m.user.save()
    quota = TeamQuota.objects.filter(team=m.team, quota__gt=0).select_related("instance_type").first()
    users.append({"username": m.user.username, "team": m.team.name,
                  "instance_type": quota.instance_type.name, "priority_class": pc})
print("USERS=" + json.dumps(users))
"""


def create_database(url: str) -> None:
    import psycopg

    parsed = urlsplit(url)
    name = parsed.path.lstrip("/")
    with psycopg.connect(parsed._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    import psycopg

    parsed = urlsplit(url)
    with psycopg.connect(parsed._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parsed.path.lstrip("/")}" WITH (FORCE)')


def wait_until_up(port: int, process: subprocess.Popen[bytes], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gunicorn exited with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/accounts/login/")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("gunicorn did not answer within a minute")


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def report(stats: Stats, seconds: float) -> int:
    total = sum(len(v) for v in stats.latencies.values())
    errors = sum(len(v) for v in stats.errors.values())
    print(f"\n{'page':<26}{'requests':>9}{'req/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}")
    baselines = [p for p in stats.latencies if p.startswith("baseline")]
    pages = sorted(p for p in stats.latencies if p not in baselines) + sorted(baselines)
    for page in pages:
        values = stats.latencies[page]
        print(
            f"{page:<26}{len(values):>9}{len(values) / seconds:>8.1f}"
            f"{percentile(values, 50) * 1000:>9.0f}{percentile(values, 95) * 1000:>9.0f}"
            f"{percentile(values, 99) * 1000:>9.0f}{len(stats.errors.get(page, [])):>8}"
        )
    print(
        f"\ntotal: {total} requests in {seconds:.0f} s = {total / seconds:.1f} req/s, errors: {errors} (target 0)"
    )
    for page, messages in stats.errors.items():
        for message in messages[:5]:
            print(f"  error on {page}: {message}")
    return 1 if errors else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60, help="seconds of load")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--think", type=float, default=0.5, help="mean seconds between a user's requests")
    parser.add_argument("--db-url", default="postgres://postgres@127.0.0.1:5432/gpugov_load")
    args = parser.parse_args()
    if not 1 <= args.users <= 1000 or not 1 <= args.duration <= 3600:
        parser.error(f"--users must be 1..1000 and --duration 1..3600, got {args.users} and {args.duration}")

    var_dir = Path(tempfile.mkdtemp(prefix="gpugov-load-"))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL"))},
        "DJANGO_SETTINGS_MODULE": "gpugov_site.settings.base",
        "DATABASE_URL": args.db_url,
        "GPUGOV_VAR_DIR": str(var_dir),
        "DJANGO_STATIC_ROOT": str(var_dir / "static"),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_HTTPS": "false",  # gunicorn on 127.0.0.1 over plain HTTP, nothing in front
        "LOG_LEVEL": "WARNING",
        # 50 users sign in from one address; the lockout counts failures only, but keep it out
        # of the way of a mistyped benchmark password.
        "AXES_FAILURE_LIMIT": "1000",
    }
    gunicorn: subprocess.Popen[bytes] | None = None
    try:
        print(f"database {urlsplit(args.db_url).path[1:]}: create, migrate, load the demo ...", flush=True)
        create_database(args.db_url)
        manage(env, "migrate", "--no-input")
        manage(env, "load_demo")
        manage(env, "collectstatic", "--no-input")
        out = manage(env, "shell", "-c", f"PASSWORD = {PASSWORD!r}\n" + PREPARE_USERS)
        users = json.loads(out.split("USERS=", 1)[1])
        static_path = "/static/css/gpugov.css"

        port = free_port()
        gunicorn = subprocess.Popen(
            [
                str(Path(PYTHON).with_name("gunicorn")),
                "gpugov_site.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(args.workers),
                "--timeout",
                "60",
                "--log-level",
                "warning",
            ],
            cwd=REPO,
            env=env,
        )
        wait_until_up(port, gunicorn)
        print(
            f"gunicorn on 127.0.0.1:{port} ({args.workers} workers); {args.users} users "
            f"({len(users)} demo members, reused round-robin) for {args.duration:.0f} s",
            flush=True,
        )
        stats = Stats()
        deadline = time.monotonic() + args.duration
        threads = [
            threading.Thread(
                target=user_loop,
                args=(
                    Session("127.0.0.1", port, stats),
                    users[i % len(users)],
                    deadline,
                    args.think,
                    static_path,
                ),
                daemon=True,
            )
            for i in range(args.users)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=args.duration + 90)
        return report(stats, time.monotonic() - started)
    finally:
        if gunicorn is not None and gunicorn.poll() is None:
            gunicorn.send_signal(signal.SIGTERM)
            try:
                gunicorn.wait(timeout=30)
            except subprocess.TimeoutExpired:
                gunicorn.kill()
        drop_database(args.db_url)
        shutil.rmtree(var_dir, ignore_errors=True)
        print("cleaned up: gunicorn stopped, database dropped, temporary files removed")


if __name__ == "__main__":
    raise SystemExit(main())
