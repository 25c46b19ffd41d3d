"""Send-once across REAL processes: three ``manage.py send_weekly_reports`` at the same moment,
on a database they share (a SQLite file, or a fresh PostgreSQL database when DATABASE_URL names
one), deliver each report to each recipient exactly once to a real SMTP server."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller

from tests.reports.conftest import Inbox, free_port
from tests.services.loop_harness import REPO, installation

pytestmark = pytest.mark.slow

SEED = """
import django
django.setup()
from tests import factories as f
f.make_cluster()
p5 = f.make_instance_type("ml.p5.48xlarge", 8)
team = f.make_team("team-a", {p5: 8})
f.make_member(f.make_user("alice"), team, "team-admin")
f.make_member(f.make_user("bob"), team, "member")
f.make_user("admin", staff=True)
"""


def test_concurrent_commands_send_each_report_once(tmp_path: Path) -> None:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        with installation(tmp_path / "var") as harness:
            env = {
                **harness.env,
                # The base settings: EMAIL_HOST set means the SMTP backend (test settings keep mail in memory).
                "DJANGO_SETTINGS_MODULE": "gpugov_site.settings.base",
                "EMAIL_HOST": "127.0.0.1",
                "EMAIL_PORT": str(controller.port),
                "REPORT_CHART_BROWSER": "off",
            }
            subprocess.run([sys.executable, "-c", SEED], cwd=REPO, env=env, check=True, timeout=120)
            senders = [
                subprocess.Popen(
                    [sys.executable, "manage.py", "send_weekly_reports", "--week", "2026-W47"],
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(3)
            ]
            outputs = [sender.communicate(timeout=180) for sender in senders]
            assert [s.returncode for s in senders] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    finally:
        controller.stop()
    received = collections.Counter(to for tos, _ in inbox.received for to in tos)
    assert received == {"alice@example.com": 1, "bob@example.com": 1, "admin@example.com": 1}
    summaries = [out.strip().splitlines()[-1] for out, _ in outputs]
    assert sum(int(line.split(": ")[1].split(" sent")[0]) for line in summaries) == 3, summaries
