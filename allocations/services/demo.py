"""The demo workload: keeps a demo cluster busy so that lending, borrowing, reclaim and
preemption can be watched live (``make run``).

Runs when ``Cluster.backend_settings["demo_workload"]`` is true (``load_demo`` sets it); beat
calls ``demo_workload_tick`` every ``ALLOCATION_INTERVAL`` (``allocations/schedule.py``). Jobs are
submitted through the self-service ``job_submit``, exactly as a user would, so they carry a
"submitted" event and ask for a cycle.

Demand is uneven on purpose. Each team keeps a backlog (running plus pending GPUs) of a share
of its quota per instance type: some teams want more than their quota (they borrow), one team
is idle most of the time (its quota is lent) and wakes up in bursts (it reclaims), and
inference bursts of the highest priority preempt low-priority work.
"""

from __future__ import annotations

import logging
import math
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db.models import Sum

from allocations.choices import ACTIVE_JOB_STATES, Role
from allocations.models import Cluster, Job, Membership, PriorityClass, TeamQuota

log = logging.getLogger(__name__)

# At most this many submissions per team and tick: a fresh demo fills up over a few ticks.
MAX_SUBMISSIONS_PER_TICK = 6


@dataclass(frozen=True)
class Profile:
    """How a demo team behaves: its backlog as a share of its quota, and what it runs."""

    demand: float  # running + pending GPUs as a multiple of the quota, outside bursts
    priorities: tuple[tuple[str, int], ...]  # (priority class, relative frequency)
    names: tuple[str, ...]
    hours: tuple[float, float]  # requested duration range, in (simulated) hours
    whole_nodes: bool = False  # multi-node training jobs
    burst_every_s: int = 0  # wall-clock period of its bursts (0: none)
    burst_for_s: int = 0
    burst_demand: float = 0.0
    burst_priority: str = ""


PROFILES: dict[str, Profile] = {
    "llm-research": Profile(
        demand=1.6,
        priorities=(("training", 6), ("experimentation", 2), ("fine-tuning", 2)),
        names=(
            "llama-70b-pretrain",
            "moe-8x7b-ablation",
            "tokenizer-v5-eval",
            "rlhf-reward-model",
            "long-ctx-128k",
        ),
        hours=(0.5, 6),
        whole_nodes=True,
    ),
    "vision": Profile(
        demand=1.2,
        priorities=(("training", 4), ("fine-tuning", 3), ("experimentation", 3)),
        names=("vit-h14-train", "sam-finetune", "detr-coco-sweep", "diffusion-xl-distill", "clip-retrain"),
        hours=(0.3, 3),
    ),
    "speech": Profile(
        demand=0.0,  # idle: its quota is lent...
        priorities=(("training", 1),),
        names=("whisper-large-ft", "tts-vocoder", "asr-multilingual"),
        hours=(0.5, 2),
        burst_every_s=600,  # ...until it wants it back, for two minutes in every ten
        burst_for_s=120,
        burst_demand=0.9,
        burst_priority="training",
    ),
    "recsys": Profile(
        demand=0.6,
        priorities=(("inference", 3), ("training", 2)),
        names=("ranker-online-serving", "two-tower-retrain", "ctr-model-refresh", "embedding-backfill"),
        hours=(0.5, 4),
        burst_every_s=300,  # a traffic peak: inference for a minute in every five
        burst_for_s=60,
        burst_demand=1.0,
        burst_priority="inference",
    ),
    "platform-infra": Profile(
        demand=0.8,
        priorities=(("fine-tuning", 2), ("experimentation", 1)),
        names=("nccl-allreduce-bench", "gpu-burn-in", "driver-canary", "checkpoint-io-test"),
        hours=(0.2, 1),
    ),
    "interns": Profile(
        demand=2.5,  # far above its quota, at low priority: the first to be preempted
        priorities=(("experimentation", 1),),
        names=("notebook-mnist", "lora-tinyllama", "bert-glue", "gan-playground", "rl-cartpole"),
        hours=(0.2, 1.5),
    ),
}
# Teams that load_demo does not know get this profile.
DEFAULT_PROFILE = Profile(
    demand=1.0,
    priorities=(("training", 1), ("experimentation", 1)),
    names=("train", "eval", "sweep"),
    hours=(0.5, 2),
)


def _in_burst(profile: Profile, team: str, now: datetime) -> bool:
    if not profile.burst_every_s:
        return False
    # Teams are offset from each other so that their bursts do not coincide.
    offset = sum(map(ord, team)) % profile.burst_every_s
    return (now.timestamp() + offset) % profile.burst_every_s < profile.burst_for_s


def _size(rng: random.Random, profile: Profile, gpus_per_node: int, room: int, left: int) -> int:
    """A job size that fits the remaining room: whole nodes for multi-node teams, else a power
    of two up to one node. With ``left`` submissions left in the tick and no more than the
    room needs (one-node jobs, then the binary digits of the rest), the largest size that fits,
    so that the tick still reaches the demand."""
    sizes = [s for s in (1, 2, 4, 8, 16) if s <= min(room, gpus_per_node)]
    if not sizes:
        return 0
    if left <= room // gpus_per_node + bin(room % gpus_per_node).count("1"):
        return sizes[-1]
    if profile.whole_nodes and room >= 2 * gpus_per_node and rng.random() < 0.6:
        return gpus_per_node * rng.choice([n for n in (2, 3, 4) if n * gpus_per_node <= room])
    return rng.choice(sizes)


def demo_workload_tick(now: datetime) -> int:
    """Submit the jobs that bring every team's backlog up to its current demand; returns how
    many were submitted. Does nothing unless the cluster's ``demo_workload`` setting is on."""
    from allocations.services.jobs import job_submit

    cluster = Cluster.objects.filter(pk=1).first()
    if cluster is None or not cluster.backend_settings.get("demo_workload"):
        return 0
    classes = {pc.name: pc for pc in PriorityClass.objects.all()}
    backlog: dict[tuple[int, int], int] = defaultdict(int)
    for row in (
        Job.objects.filter(state__in=ACTIVE_JOB_STATES)
        .values("team_id", "instance_type_id")
        .annotate(gpus=Sum("gpus"))
        .order_by()
    ):
        backlog[row["team_id"], row["instance_type_id"]] = row["gpus"]
    submitters = {
        m.team_id: m.user
        for m in Membership.objects.filter(role__in=(Role.MEMBER, Role.TEAM_ADMIN)).select_related("user")
    }
    # Seeded per minute: a restarted demo behaves the same way at the same time.
    rng = random.Random(int(now.timestamp() // 60))
    submitted = 0
    quotas = TeamQuota.objects.filter(team__active=True, quota__gt=0).select_related("team", "instance_type")
    for quota in quotas.order_by("team__name", "instance_type__name"):
        team, kind = quota.team, quota.instance_type
        profile = PROFILES.get(team.name, DEFAULT_PROFILE)
        burst = _in_burst(profile, team.name, now)
        demand = profile.burst_demand if burst else profile.demand
        missing = math.ceil(quota.quota * demand) - backlog[team.pk, kind.pk]
        largest = kind.gpus_per_node * 4  # lowered when a size is refused
        for left in range(MAX_SUBMISSIONS_PER_TICK, 0, -1):
            gpus = _size(rng, profile, kind.gpus_per_node, min(missing, largest), left)
            if gpus <= 0:
                break
            names, weights = zip(*profile.priorities, strict=True)
            priority = profile.burst_priority if burst else rng.choices(names, weights)[0]
            name = f"{rng.choice(profile.names)}-{rng.randrange(1000, 9999)}"
            try:
                job_submit(
                    user=submitters.get(team.pk),
                    team=team,
                    name=name,
                    instance_type=kind,
                    gpus=gpus,
                    priority_class=classes.get(priority),
                    command=f"python -m {name.rsplit('-', 1)[0].replace('-', '_')}.main",
                    image=f"registry.example.com/{team.name}/trainer:2026.11",
                    requested_duration=int(rng.uniform(*profile.hours) * 3600),
                )
            except ValidationError as exc:  # e.g. larger than the team may ever use: try smaller
                log.debug("demo job for %s not submitted: %s", team.name, exc)
                largest = gpus - 1
                continue
            missing -= gpus
            submitted += 1
    return submitted
