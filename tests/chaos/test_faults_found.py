"""The faults of docs/chaos.md items 1-4, each reproduced alone (without the whole chaos run).

1. Redis restarting: a submission is stored and answered 201 though asking for a cycle (the
   cache's debounce key, in Redis) fails after the commit; the request is logged and dropped,
   and beat runs the cycle anyway (a 500 would make a retrying client submit twice).
2. PostgreSQL restarting: the server ends the web's kept connections (CONN_MAX_AGE); Django
   checks a kept connection before a request reuses it (CONN_HEALTH_CHECKS), so each web
   thread's first request after the restart is served.
3. Redis restarting: the team queue page is served; its start estimates take a cache error for
   a miss and keep nothing.
4. slurmctld restarting: Slurm can leak an idle node's GPUs and refuse every job there (see
   LEAKED_NODE below); the Slurm backend reports such a node down, so the loop does not place
   the same job there every cycle.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import close_old_connections, connection
from django.test import override_settings
from rest_framework.test import APIClient

from allocations.models import Job
from allocations.services import cycle_requests
from tests.conftest import Personas


def closed_port() -> int:
    """A loopback port nobody listens on: connecting to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_down() -> Iterator[None]:
    """The cache is a Redis that does not answer (a real refused connection, not a mock)."""
    unreachable = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{closed_port()}/0",
        }
    }
    # override_settings drops the cache handlers (Django's setting_changed receiver).
    with override_settings(CACHES=unreachable):
        yield


def test_request_cycle_while_redis_is_down_is_dropped_not_raised(redis_down: None) -> None:
    assert cycle_requests.request_cycle() is False


@pytest.mark.django_db(transaction=True)
def test_a_job_submitted_while_redis_restarts_is_stored_and_answered_201(
    personas: Personas, redis_down: None
) -> None:
    client = APIClient()
    client.force_authenticate(personas.member)

    answer = client.post(
        "/api/v1/jobs/",
        {"team": "team-a", "name": "during-redis-restart", "instance_type": "ml.p5.48xlarge",
         "gpus": 8, "command": "sleep 5", "requested_duration": 5},
        format="json",
    )  # fmt: skip

    assert answer.status_code == 201, answer.content
    assert Job.objects.filter(name="during-redis-restart").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_request_after_postgresql_dropped_the_kept_connection_is_served() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL ends connections on restart; SQLite has none to end")
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] > 0  # connections are kept between requests
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    # What a restart does to every kept connection: the server ends it.
    import psycopg

    dsn = settings.DATABASES["default"]
    with psycopg.connect(
        host=dsn["HOST"], port=dsn["PORT"] or 5432, user=dsn["USER"], dbname="postgres", autocommit=True
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])

    try:
        close_old_connections()  # what Django runs as each request starts
        with connection.cursor() as cursor:  # the request's first query
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
    finally:
        connection.close()  # whatever happened, the test database's flush gets a live connection


@pytest.mark.django_db
def test_the_queue_page_is_served_while_redis_restarts(personas: Personas, redis_down: None) -> None:
    from django.test import Client

    client = Client()
    client.force_login(personas.member)

    assert client.get("/teams/team-a/").status_code == 200


# 4. slurmctld restarting while jobs are requeued (Slurm 22.05) can leave an idle node's GPUs
#    counted as used with no job on it ("gres_used": "gpu:h100:8(IDX:0-7)", "alloc_cpus": 0).
#    Slurm refuses every job placed there ("Requested node configuration is not available"),
#    and since the node looks ready and empty the engine would place the same job there every
#    cycle. The backend reports such a node down, saying why. (The node below is sinfo --json
#    output captured from a chaos run.)
LEAKED_NODE = {
    "name": "node4",
    "state": "idle",
    "state_flags": [],
    "gres": "gpu:h100:8",
    "gres_used": "gpu:h100:8(IDX:0-7)",
    "features": "ml.p5.48xlarge",
    "alloc_cpus": 0,
    "reason": "",
}


@pytest.mark.parametrize(
    ("changes", "state"),
    [
        ({}, "down"),
        ({"gres_used": "gpu:h100:4(IDX:0-3)"}, "down"),
        ({"gres_used": "gpu:h100:0(IDX:N/A)"}, "ready"),  # nothing leaked
        ({"alloc_cpus": 1}, "ready"),  # a job holds the GPUs: the node is busy, not broken
        ({"state": "drained", "gres_used": "gpu:h100:0(IDX:N/A)"}, "draining"),
    ],
)
def test_an_idle_node_whose_gpus_slurm_counts_as_used_is_down(changes: dict[str, object], state: str) -> None:
    from allocations.backends.slurm import SlurmBackend

    node = SlurmBackend({})._node({**LEAKED_NODE, **changes})

    assert (node.name, node.instance_type, node.gpus, node.state) == ("node4", "ml.p5.48xlarge", 8, state)
    if state == "down":
        assert "in use with no job on it" in node.reason and "scontrol reconfigure" in node.reason
