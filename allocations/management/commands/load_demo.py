"""``manage.py load_demo``: a demo cluster with realistic teams, written through the services.

Idempotent: a second run finds every object by its name and creates nothing twice; what an
administrator changed since (a quota, a node's state) is kept. The admin's generated password
is printed once, by the run that creates the account.

``--history-days N`` (``make run`` gives 14) also writes N days of synthetic past
(``backfill_demo_history``) while the cluster has no capacity history at all, so that the
dashboards, the weekly reports and the what-if lab have a past to show from the first minute;
once the cluster has a history of its own, nothing of it is replaced.
"""

from __future__ import annotations

import secrets
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from allocations.models import (
    CapacityMinute,
    CapacityRollup,
    Cluster,
    ClusterPolicy,
    InstanceType,
    Membership,
    Node,
    PriorityClass,
    Team,
)
from allocations.services import memberships, policy

CLUSTER = {
    "name": "demo",
    "backend_kind": "simulated",
    # 60: a simulated hour passes in a minute; demo_workload: the loop's generator submits jobs.
    "backend_settings": {"speedup": 60, "demo_workload": True},
    "time_zone": "UTC",
}

# name, GPUs a node, $ per GPU-hour, description, nodes, node name prefix
INSTANCE_TYPES = [
    ("ml.p5.48xlarge", 8, "12.29", "8x NVIDIA H100 80GB", 16, "p5"),
    ("ml.p4d.24xlarge", 8, "4.10", "8x NVIDIA A100 40GB", 24, "p4d"),
    ("ml.g5.12xlarge", 4, "1.42", "4x NVIDIA A10G 24GB", 24, "g5"),
]

PRIORITY_CLASSES = [
    ("inference", 100, "Serving traffic: runs first and preempts everything else"),
    ("training", 70, "Scheduled training runs"),
    ("fine-tuning", 50, "Fine-tuning and evaluation"),
    ("experimentation", 10, "Notebooks and experiments: first to be preempted"),
]

PCT, ABS, UNL = "percent", "absolute", "unlimited"
# Quotas leave capacity unallocated on every type (p5 96/128, p4d 160/192, g5 80/96 GPUs).
TEAMS: list[dict[str, Any]] = [
    {
        "name": "llm-research",
        "display_name": "LLM Research",
        "fair_share_weight": 40,
        "quotas": {
            "ml.p5.48xlarge": {"quota": 64, "borrow_limit_kind": PCT, "borrow_limit_percent": 50},
            "ml.p4d.24xlarge": {"quota": 48, "borrow_limit_kind": ABS, "borrow_limit": 32},
        },
    },
    {
        "name": "vision",
        "display_name": "Computer Vision",
        "fair_share_weight": 20,
        "preempt_team_tasks": "lower-or-newer-equal-priority",
        "quotas": {
            "ml.p5.48xlarge": {"quota": 24, "borrow_limit_kind": PCT, "borrow_limit_percent": 100},
            "ml.p4d.24xlarge": {"quota": 48},
            "ml.g5.12xlarge": {"quota": 16},
        },
    },
    {
        "name": "speech",
        "display_name": "Speech",
        "fair_share_weight": 15,
        "sharing": "lend",  # lends what it does not use, never borrows
        "quotas": {
            "ml.p4d.24xlarge": {"quota": 32, "lend_limit": 16},  # keeps 16 GPUs for itself
            "ml.g5.12xlarge": {"quota": 24},
        },
    },
    {
        "name": "recsys",
        "display_name": "Recommendations",
        "fair_share_weight": 15,
        "sharing": "dont-lend",  # production models: its quota is never lent
        "reclaim": "lower-priority",
        "quotas": {"ml.p4d.24xlarge": {"quota": 24}, "ml.g5.12xlarge": {"quota": 16}},
    },
    {
        "name": "platform-infra",
        "display_name": "Platform Infrastructure",
        "fair_share_weight": 5,
        "reclaim": "lower-priority",
        "preempt_while_borrowing": "never",
        "quotas": {
            "ml.p5.48xlarge": {"quota": 8, "borrow_limit_kind": ABS, "borrow_limit": 8},
            "ml.g5.12xlarge": {"quota": 16, "borrow_limit_kind": UNL},
        },
    },
    {
        "name": "interns",
        "display_name": "Interns",
        "fair_share_weight": 1,
        "preempt_team_tasks": "never",
        "reclaim": "never",
        "quotas": {
            "ml.p4d.24xlarge": {"quota": 8, "borrow_limit_kind": ABS, "borrow_limit": 16},
            "ml.g5.12xlarge": {"quota": 8, "borrow_limit_kind": PCT, "borrow_limit_percent": 200},
        },
    },
]
# Each team gets a team admin and a member: <team>.lead and <team>.dev.
TEAM_USERS = [("lead", "team-admin"), ("dev", "member")]


class Command(BaseCommand):
    help = "Load a demo cluster (3 instance types, 64 nodes, 6 teams, users); safe to run again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--history-days",
            type=int,
            default=0,
            help="Also write this many days of synthetic history while the cluster has none (default 0)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["history_days"]
        if not 0 <= days <= 3650:
            raise CommandError(f"--history-days: expected 0 to 3650 days, got {days}")
        self.created: list[str] = []
        with transaction.atomic():
            self._cluster()
            types = self._instance_types()
            self._priority_classes()
            teams = self._teams(types)
            team_password = self._team_users(teams)
            admin_password = self._admin()
        self.stdout.write(
            f"Demo loaded: created {', '.join(self.created)}."
            if self.created
            else "Demo already loaded: nothing to create."
        )
        if team_password:
            self.stdout.write(
                f"Team users (<team>.lead = team admin, <team>.dev = member) have the password: {team_password}"
            )
        if admin_password:
            self.stdout.write(self.style.SUCCESS(f"Created user 'admin' with the password: {admin_password}"))
            self.stdout.write("It is shown only this once.")
        else:
            self.stdout.write("User 'admin' exists; to reset its password: manage.py changepassword admin")
        if days:
            if CapacityMinute.objects.exists() or CapacityRollup.objects.exists():
                self.stdout.write("The cluster has a capacity history already: no synthetic history written.")
            else:
                call_command("backfill_demo_history", days=days, stdout=self.stdout, stderr=self.stderr)

    def _count(self, what: str, number: int) -> None:
        if number:
            self.created.append(f"{number} {what}")

    def _cluster(self) -> None:
        if not Cluster.objects.filter(pk=1).exists():
            policy.cluster_update(actor=None, **CLUSTER)
            self._count("cluster", 1)
        if not ClusterPolicy.objects.filter(cluster_id=1).exists():
            policy.cluster_policy_update(actor=None)

    def _instance_types(self) -> dict[str, InstanceType]:
        types, new_types, new_nodes = {}, 0, 0
        for name, gpus, price, description, count, prefix in INSTANCE_TYPES:
            instance_type = InstanceType.objects.filter(name=name).first()
            if instance_type is None:
                instance_type = policy.instance_type_create(
                    actor=None,
                    name=name,
                    gpus_per_node=gpus,
                    price_per_gpu_hour=Decimal(price),
                    description=description,
                )
                new_types += 1
            types[name] = instance_type
            existing = set(Node.objects.values_list("name", flat=True))
            for i in range(1, count + 1):
                node_name = f"{prefix}-{i:03d}"
                if node_name not in existing:
                    policy.node_create(actor=None, name=node_name, instance_type=instance_type)
                    new_nodes += 1
        self._count("instance types", new_types)
        self._count("nodes", new_nodes)
        return types

    def _priority_classes(self) -> None:
        existing = set(PriorityClass.objects.values_list("name", flat=True))
        new = 0
        for name, weight, description in PRIORITY_CLASSES:
            if name not in existing:
                policy.priority_class_create(actor=None, name=name, weight=weight, description=description)
                new += 1
        self._count("priority classes", new)

    def _teams(self, types: dict[str, InstanceType]) -> list[Team]:
        teams, new = [], 0
        for spec in TEAMS:
            settings = {k: v for k, v in spec.items() if k != "quotas"}
            team = Team.objects.filter(name=spec["name"]).first()
            if team is None:
                quotas = {types[type_name]: quota for type_name, quota in spec["quotas"].items()}
                team = policy.team_create(actor=None, quotas=quotas, **settings)
                new += 1
            teams.append(team)
        self._count("teams", new)
        return teams

    def _team_users(self, teams: list[Team]) -> str:
        """Create the missing team users (one shared password, returned when any was created)
        and memberships."""
        users = get_user_model().objects
        password = secrets.token_urlsafe(9)
        new_users = new_members = 0
        for team in teams:
            for suffix, role in TEAM_USERS:
                username = f"{team.name}.{suffix}"
                user = users.filter(username=username).first()
                if user is None:
                    user = users.create_user(
                        username=username, email=f"{username}@example.com", password=password
                    )
                    new_users += 1
                if not Membership.objects.filter(user=user, team=team).exists():
                    memberships.membership_add(actor=None, team=team, user=user, role=role)
                    new_members += 1
        self._count("users", new_users)
        self._count("memberships", new_members)
        return password if new_users else ""

    def _admin(self) -> str:
        users = get_user_model().objects
        if users.filter(username="admin").exists():
            return ""
        password = secrets.token_urlsafe(12)
        users.create_superuser(username="admin", email="admin@example.com", password=password)
        self._count("admin user", 1)
        return password
