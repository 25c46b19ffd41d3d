"""Races on PostgreSQL, made to happen: requests that run at once, held at a table lock until
every one of them has gone as far as it can, then let go together."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
from django.db import connection


def waiting_on_locks() -> int:
    """Backends of the test database that wait for a lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


def race_behind_a_lock(table: str, calls: list[Callable[[], None]], wait_s: float = 60) -> bool:
    """Run each of ``calls`` in its own thread while ``table`` is locked (reads pass, writes
    wait); release it once every call waits for a lock, or after ``wait_s``. Returns whether
    they all waited; an exception in a call is raised here, since a thread's would vanish."""
    failures: list[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()  # this thread's own connection

    with psycopg.connect(**connection.get_connection_params()) as blocker:
        blocker.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
        threads = [threading.Thread(target=run, args=(call,)) for call in calls]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + wait_s
        while waiting_on_locks() < len(calls) and time.monotonic() < deadline:
            time.sleep(0.05)
        all_in = waiting_on_locks() >= len(calls)
        blocker.rollback()
    for thread in threads:
        thread.join(60)
    if failures:
        raise failures[0]
    return all_in
