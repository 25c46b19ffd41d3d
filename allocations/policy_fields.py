"""The policy's fields, in one registry.

Each tuple lists the fields of one kind of policy object that a person may set, in the order
forms and previews show them. The services take them as what a write may change and what the
audit trail records; the HyperPod and Kueue import, the what-if lab's drafts, the console's
forms, the admin and the API's serializers take them as what they show or set. A new setting
is added here, to its model and migration, and to the service's rules (``services/policy.py``).
"""

from __future__ import annotations

from typing import Any

from allocations.choices import BorrowLimitKind

INSTANCE_TYPE_FIELDS = ("name", "gpus_per_node", "price_per_gpu_hour", "description")
NODE_FIELDS = ("name", "instance_type", "gpus", "state", "reason")
PRIORITY_CLASS_FIELDS = ("name", "weight", "description")
CLUSTER_FIELDS = ("name", "backend_kind", "backend_settings", "time_zone")
CLUSTER_POLICY_FIELDS = ("idle_allocation", "task_ranking", "share_unallocated", "queueing")
# A team's settings: everything but its name, which identifies it in an import or a draft.
TEAM_SETTINGS = (
    "display_name",
    "active",
    "fair_share_weight",
    "sharing",
    "preempt_team_tasks",
    "reclaim",
    "preempt_while_borrowing",
    "preempt_while_borrowing_max_priority",
)
TEAM_FIELDS = ("name", *TEAM_SETTINGS)
QUOTA_FIELDS = ("quota", "borrow_limit_kind", "borrow_limit_percent", "borrow_limit", "lend_limit")
# A quota row with these values means the same as no row (POLICY.md section 1's defaults).
QUOTA_DEFAULTS: dict[str, Any] = {
    "quota": 0,
    "borrow_limit_kind": BorrowLimitKind.PERCENT,
    "borrow_limit_percent": 50,
    "borrow_limit": None,
    "lend_limit": None,
}
