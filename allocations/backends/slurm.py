"""The Slurm backend (kind ``slurm``): gpugov decides, Slurm executes (docs/slurm.md).

gpugov's engine chooses which job runs and on which nodes; this module makes Slurm 22.05 (and
later) do exactly that through its commands:

* ``start``: ``sbatch --test-only`` (Slurm's checks, which a held submission skips), then
  ``sbatch -H`` (held) pinned to the chosen nodes (``--nodelist``, ``-N``,
  ``--gres=gpu:<per node>``) under the name ``<job_name_prefix><job_id>``, then
  ``scontrol release``. Holding it until gpugov has retired any older copy means one gpugov
  job never has two runnable Slurm jobs; a crash in between leaves a held job that the next
  ``start`` finds and replaces.
* ``preempt``: ``scontrol requeuehold`` (``hold`` for a job not yet running): the job goes back
  to pending with priority 0, so Slurm never restarts it by itself.
* a later ``start`` of a preempted job submits a fresh copy on the new nodes and cancels the
  held one. A fresh copy starts at once, whereas Slurm delays a requeued job by
  ``cred_expire + 1`` seconds (121 s by default).
* ``cancel``: ``scancel`` of every live copy.
* ``list_nodes`` / ``list_jobs``: ``sinfo --json`` / ``squeue --json`` (in 22.05 ``--json``
  ignores filters, so this module filters gpugov's jobs by name itself).

A command that cannot reach slurmctld (connection refused, timeout, munge down) raises
:class:`TransientBackendError`; a request Slurm refuses raises :class:`PermanentBackendError`
quoting Slurm's message.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocations.backends.base import (
    BackendJob,
    BackendJobState,
    BackendNode,
    ClusterBackend,
    JobSpec,
    NodeState,
    PermanentBackendError,
    TransientBackendError,
    register,
)

# Messages of Slurm's commands (and of ssh/munge in front of them) that mean "slurmctld could
# not be reached", as opposed to "slurmctld refused the request".
TRANSIENT_MESSAGES = (
    "unable to contact slurm controller",
    "connect failure",
    "connection refused",
    "socket timed out",
    "timed out",
    "zero bytes were transmitted",
    "communication connection failure",
    "transport endpoint is not connected",
    "unexpected message received",
    "slurm backup controller in standby",
    "munge",
    "could not resolve hostname",
    "no route to host",
)

# Slurm job states (``squeue``'s JOB_STATE) -> what gpugov sees.
JOB_STATES: dict[str, BackendJobState] = {
    "PENDING": BackendJobState.PENDING,
    "REQUEUED": BackendJobState.PENDING,
    "REQUEUE_HOLD": BackendJobState.PENDING,
    "REQUEUE_FED": BackendJobState.PENDING,
    # These hold their nodes: gpugov must count them as running.
    "RUNNING": BackendJobState.RUNNING,
    "CONFIGURING": BackendJobState.RUNNING,
    "COMPLETING": BackendJobState.RUNNING,
    "SUSPENDED": BackendJobState.RUNNING,
    "RESIZING": BackendJobState.RUNNING,
    "SIGNALING": BackendJobState.RUNNING,
    "STAGE_OUT": BackendJobState.RUNNING,
    "STOPPED": BackendJobState.RUNNING,
    "COMPLETED": BackendJobState.FINISHED,
    "FAILED": BackendJobState.FAILED,
    "TIMEOUT": BackendJobState.FAILED,
    "NODE_FAIL": BackendJobState.FAILED,
    "OUT_OF_MEMORY": BackendJobState.FAILED,
    "BOOT_FAIL": BackendJobState.FAILED,
    "DEADLINE": BackendJobState.FAILED,
    "SPECIAL_EXIT": BackendJobState.FAILED,
    # Slurm's own preemption in CANCEL mode ends the job; gpugov did not ask for it.
    "PREEMPTED": BackendJobState.FAILED,
    "CANCELLED": BackendJobState.CANCELLED,
    "REVOKED": BackendJobState.CANCELLED,
}
LIVE_STATES = frozenset({BackendJobState.PENDING, BackendJobState.RUNNING})
# Pending reasons of a released job that only waits for the next scheduling pass (or for the
# GPUs a preempted job is still giving back). Any other reason (ReqNodeNotAvail,
# PartitionDown, InvalidAccount...) means it is stuck, and it is reported pending.
SCHEDULER_WAIT_REASONS = frozenset({"None", "", "Priority", "Resources"})

# Node state words (``sinfo``'s base state and flags, any case, ``*``/``~``/``#`` suffixes
# stripped) that make a node unusable, or being emptied.
NODE_DOWN_WORDS = frozenset(
    {
        "DOWN",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "INVAL",
        "INVALID",
        "INVALID_REG",
        "UNKNOWN",
        "FUTURE",
        "POWERED_DOWN",
        "POWER_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "REBOOT_ISSUED",
        "REBOOT_REQUESTED",
        "CLOUD",
    }
)
NODE_DRAIN_WORDS = frozenset({"DRAIN", "DRAINING", "DRAINED"})
NODE_READY_WORDS = frozenset({"IDLE", "MIXED", "ALLOCATED", "ALLOC", "MIX", "COMPLETING", "PLANNED"})

SETTINGS_DEFAULTS: dict[str, Any] = {
    "bin_dir": "",
    "command_prefix": [],
    "timeout_s": 30,
    "start_timeout_s": 180,
    "job_name_prefix": "gpugov-",
    "partition": "",
    "account": "",
    "teams": {},
    "partitions": [],
    "node_instance_types": {},
    "instance_type_feature_prefix": "ml.",
    "workdir": "/tmp",
    "output": "%x-%j.out",
    "extra_sbatch_args": [],
}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One Slurm job (one copy of a gpugov job), as read from ``squeue --json``."""

    slurm_id: str
    name: str
    state: str
    reason: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    held: bool
    restarts: int
    start_time: float | None
    end_time: float | None
    exit_status: int | None
    required_nodes: tuple[str, ...] = ()
    # When Slurm last made it eligible (its release; its submission if Slurm gives no time).
    eligible_since: float | None = None

    @property
    def starting(self) -> bool:
        """Released by gpugov, not yet running, and only waiting for Slurm's scheduler.

        Slurm then starts it on ``required_nodes`` (all of them, as ``-N`` equals their
        number) at its next scheduling pass: for gpugov it is already placed there.
        """
        return (
            self.state == "PENDING"
            and not self.held
            and self.restarts == 0
            and self.reason in SCHEDULER_WAIT_REASONS
        )


# --- parsers (pure functions of Slurm's output; unit-tested on captured output) -------------


def expand_hostlist(expression: str) -> list[str]:
    """Expand a Slurm hostlist (``node[1-3,7],gpu-a[01-02]``) like ``scontrol show hostnames``.

    Ranges keep their zero padding; several bracket groups in one name expand as a product.
    Raises ValueError naming the expression when it is malformed.
    """
    expression = expression.strip()
    if not expression or expression == "(null)":
        return []
    names: list[str] = []
    for item in _split_top_level(expression):
        parts = re.split(r"(\[[^\]]*\])", item)
        choices: list[list[str]] = []
        for part in parts:
            if part.startswith("["):
                choices.append(_expand_ranges(part[1:-1], expression))
            elif "[" in part or "]" in part:
                raise ValueError(f"malformed hostlist {expression!r}")
            else:
                choices.append([part])
        names.extend("".join(combo) for combo in itertools.product(*choices))
    return names


def _split_top_level(expression: str) -> list[str]:
    """Split on the commas that are outside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"malformed hostlist {expression!r}")
        elif char == "," and depth == 0:
            items.append(expression[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"malformed hostlist {expression!r}")
    items.append(expression[start:])
    return [item for item in items if item]


def _expand_ranges(ranges: str, expression: str) -> list[str]:
    values: list[str] = []
    for piece in ranges.split(","):
        low, _, high = piece.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"malformed range {piece!r} in hostlist {expression!r}")
        if not high:
            values.append(low)
            continue
        width = len(low) if low.startswith("0") else 0
        if int(high) < int(low):
            raise ValueError(f"descending range {piece!r} in hostlist {expression!r}")
        values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return values


# docs/slurm.md "Resources": a GPU partition profile ``mig-<T>`` is the Slurm GPU gres type
# ``<T>``, NVIDIA's MIG profile name (``mig-1g.5gb`` <-> ``gpu:1g.5gb``). A gres type of that
# form is a partition; any other type (``h100``) is whole GPUs.
PARTITION_TYPE = re.compile(r"^[0-9]+g\.[0-9]+gb$")
PROFILE_PREFIX = "mig-"


def gres_type_of_profile(profile: str) -> str:
    """``mig-1g.5gb`` -> ``1g.5gb``; ValueError naming a profile Slurm cannot express."""
    kind = profile.removeprefix(PROFILE_PREFIX)
    if not profile.startswith(PROFILE_PREFIX) or not PARTITION_TYPE.match(kind):
        raise ValueError(
            f"partition profile {profile!r} has no Slurm gres type: expected mig-<n>g.<m>gb (mig-1g.5gb)"
        )
    return kind


def _gres_entries(gres: str) -> list[tuple[str, int]]:
    """The GPU entries of a Gres string as (type or "", count): ``gpu:h100:8(S:0-1)`` ->
    [("h100", 8)]; also a job's TRES-per-node (``gres:gpu:4``, ``gres/gpu:h100=4``)."""
    entries = []
    for entry in _split_top_level(gres.strip()) if gres and gres.strip() != "(null)" else []:
        entry = re.sub(r"\(.*\)$", "", entry.strip())
        entry = entry.removeprefix("gres:").removeprefix("gres/")
        fields = re.split(r"[:=]", entry)
        if fields[0] != "gpu":
            continue
        if len(fields) > 1 and fields[-1].isdigit():
            entries.append((fields[1] if len(fields) > 2 else "", int(fields[-1])))
        elif len(fields) <= 2:
            entries.append((fields[1] if len(fields) == 2 else "", 1))  # "gpu" or "gpu:h100": one GPU
        else:
            raise ValueError(f"cannot read a GPU count from gres entry {entry!r} in {gres!r}")
    return entries


def gres_gpus(gres: str) -> int:
    """Whole GPUs in a node's Gres string: ``gpu:h100:8(S:0-1)`` -> 8, ``gpu:2,shard:8`` -> 2.

    Several GPU entries (``gpu:a100:4,gpu:h100:4``) add up; no GPU entry gives 0; partitions
    (``gpu:1g.5gb:14``) are not whole GPUs (``gres_partitions``). Also accepts a job's
    TRES-per-node (``gres:gpu:4``, ``gres/gpu:h100=4``).
    """
    return sum(count for kind, count in _gres_entries(gres) if not PARTITION_TYPE.match(kind))


def gres_partitions(gres: str) -> dict[str, int]:
    """The GPU partitions in a Gres string, by profile: ``gpu:a100:4,gpu:1g.5gb:14`` ->
    ``{"mig-1g.5gb": 14}``."""
    out: dict[str, int] = {}
    for kind, count in _gres_entries(gres):
        if PARTITION_TYPE.match(kind):
            out[PROFILE_PREFIX + kind] = out.get(PROFILE_PREFIX + kind, 0) + count
    return out


def whole_gpu_types(gres: str) -> set[str]:
    """The types of a Gres string's whole GPUs ("" for untyped ones)."""
    return {kind for kind, _ in _gres_entries(gres) if not PARTITION_TYPE.match(kind)}


def node_state(state: str | Sequence[str], flags: Iterable[str] = ()) -> NodeState:
    """Map Slurm's node state (+ flags) to gpugov's: down beats draining beats ready.

    ``state`` is ``sinfo``'s long state (``idle``, ``drained``, ``down*``, ``mixed+drain``) or
    a list of words (the JSON of Slurm 23.02+); ``flags`` the ``state_flags`` of 22.05's JSON.
    Anything not understood counts as down: gpugov must not place work on it.
    """
    raw = [state] if isinstance(state, str) else list(state)
    words: set[str] = set()
    for item in [*raw, *flags]:
        text = item.strip().upper()
        if text.endswith(("*", "~", "#", "!", "%", "$", "@", "^", "-")):
            # sinfo's suffixes: '*' = not responding, '~' = powered off, '#' = powering up...
            if text.endswith("*"):
                words.add("NOT_RESPONDING")
            elif text.endswith(("~", "#", "!", "%")):
                words.add("POWERED_DOWN")
            text = text.rstrip("*~#!%$@^-")
        words.update(w for w in re.split(r"[+ ]", text) if w)
    if words & NODE_DOWN_WORDS:
        return NodeState.DOWN
    if words & NODE_DRAIN_WORDS:
        return NodeState.DRAINING
    if words & NODE_READY_WORDS:
        return NodeState.READY
    return NodeState.DOWN


# Base job states in which a Slurm job holds its nodes' GPUs.
HOLDING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}
)


def held_gpus(squeue: Mapping[str, Any]) -> dict[str, int | None]:
    """GPUs held on each node by the jobs of ``squeue --json`` (every user's); ``None`` for a
    node where a job holds GPUs this cannot count (asked per job or per task, or unreadable).
    A job holding nodes that cannot be read makes the whole answer empty: nothing is judged."""
    held: dict[str, int | None] = {}
    for raw in squeue.get("jobs", []):
        if not isinstance(raw, Mapping) or _first_state(raw.get("job_state")) not in HOLDING_STATES:
            continue
        try:
            nodes = expand_hostlist(str(raw.get("nodes") or ""))
        except ValueError:
            return {}
        try:
            per_node: int | None = gres_gpus(str(raw.get("tres_per_node") or ""))
        except ValueError:
            per_node = None
        elsewhere = " ".join(
            str(raw.get(k) or "") for k in ("tres_per_job", "tres_per_task", "tres_per_socket")
        )
        if "gpu" in elsewhere:
            per_node = None
        for node in nodes:
            count = held.get(node, 0)
            held[node] = None if count is None or per_node is None else count + per_node
    return held


def leaked_gpus(raw_node: Mapping[str, Any], held: Mapping[str, int | None]) -> int:
    """GPUs of one ``sinfo --json`` node that Slurm counts as used beyond what jobs hold.

    With ``held`` empty, only a node where no job holds a CPU can be judged (all its used
    GPUs are leaked); a node where a job holds GPUs that cannot be counted is never judged.
    """
    try:
        used = gres_gpus(str(raw_node.get("gres_used") or ""))
    except ValueError:
        return 0
    name = str(raw_node.get("name") or raw_node.get("hostname") or "")
    if not _number(raw_node.get("alloc_cpus")):
        return used
    holding = held.get(name, 0) if held else None
    if holding is None:
        return 0
    return max(0, used - holding)


def exit_code_from_status(status: int) -> int:
    """Slurm reports a wait status: 768 = exit 3; a signal gives 128 + signal (15 -> 143)."""
    signal = status & 0x7F
    return 128 + signal if signal else (status >> 8) & 0xFF


def _number(value: Any) -> float | None:
    """A JSON number of 22.05 (plain) or 23.02+ (``{"set": true, "number": n}``)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _first_state(value: Any) -> str:
    """22.05 gives ``"PENDING"``; 23.02+ gives ``["PENDING", "REQUEUED"]``: the base comes first."""
    if isinstance(value, list):
        return str(value[0]).upper() if value else "UNKNOWN"
    return str(value or "UNKNOWN").upper()


def parse_squeue_json(document: Mapping[str, Any], name_prefix: str = "") -> list[SlurmJob]:
    """The jobs in ``squeue --json`` output (22.05 and later layouts) named ``name_prefix...``.

    Only those are parsed: another user's odd job must not break gpugov. A job of gpugov's that
    cannot be read raises PermanentBackendError naming it and the value.
    """
    jobs = []
    for raw in document.get("jobs", []):
        if not isinstance(raw, Mapping) or not str(raw.get("name") or "").startswith(name_prefix):
            continue
        try:
            jobs.append(_slurm_job(raw))
        except (ValueError, TypeError) as exc:
            raise PermanentBackendError(
                f"squeue --json: cannot read job {raw.get('job_id')!r} ({raw.get('name')!r}): {exc}"
            ) from exc
    return jobs


def _slurm_job(raw: Mapping[str, Any]) -> SlurmJob:
    """One job of ``squeue --json``."""
    raw_state = raw.get("job_state")
    state = _first_state(raw_state)
    flags = raw_state[1:] if isinstance(raw_state, list) else []
    priority = _number(raw.get("priority"))
    start = _number(raw.get("start_time"))
    end = _number(raw.get("end_time"))
    exit_raw = raw.get("exit_code")
    exit_status: int | None
    if isinstance(exit_raw, Mapping):  # 23.02+: {"status": [...], "return_code": {...}}
        exit_number = _number(exit_raw.get("return_code"))
        signal = _number((exit_raw.get("signal") or {}).get("id"))
        exit_status = int(signal) if signal else (int(exit_number or 0) << 8)
    else:
        exit_number = _number(exit_raw)
        exit_status = None if exit_number is None else int(exit_number)
    held = priority == 0
    state_name = state
    # A preempted job passes through COMPLETING (its script is being killed) already held:
    # for gpugov it is back to pending, and a new start must not mistake it for running.
    if "REQUEUE_HOLD" in flags or (held and state == "COMPLETING"):
        state_name = "REQUEUE_HOLD"
    return SlurmJob(
        slurm_id=str(raw.get("job_id")),
        name=str(raw.get("name") or ""),
        state=state_name,
        reason=str(raw.get("state_reason") or ""),
        nodes=tuple(expand_hostlist(str(raw.get("nodes") or ""))),
        gpus_per_node=gres_gpus(str(raw.get("tres_per_node") or "")),
        held=held,
        restarts=int(_number(raw.get("restart_cnt")) or 0),
        required_nodes=tuple(expand_hostlist(str(raw.get("required_nodes") or ""))),
        eligible_since=_number(raw.get("eligible_time")) or _number(raw.get("submit_time")) or None,
        start_time=start if start else None,
        end_time=end if end else None,
        exit_status=exit_status,
    )


def backend_job(
    job_id: str, job: SlurmJob, now: float | None = None, start_timeout_s: float | None = None
) -> BackendJob:
    """What gpugov is told about one Slurm copy of its job ``job_id``.

    A copy released onto its nodes and waiting for Slurm's scheduler counts as running there,
    but only for ``start_timeout_s`` (when ``now`` is given): a copy Slurm has not started by
    then is waiting for something gpugov does not see (GPUs Slurm counts as used that no job
    holds, a job of another user on those nodes), and is reported pending, saying so.
    """
    state = JOB_STATES.get(job.state, BackendJobState.FAILED)
    ended = state not in LIVE_STATES
    reason = "" if job.reason in ("None", "") else job.reason
    if state is BackendJobState.FAILED and job.state not in JOB_STATES:
        reason = f"unknown Slurm job state {job.state}" + (f" ({reason})" if reason else "")
    elif job.state not in ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "REQUEUE_HOLD"):
        reason = job.state.lower() + (f": {reason}" if reason else "")
    overdue = (
        job.starting
        and now is not None
        and start_timeout_s is not None
        and job.eligible_since is not None
        and now - job.eligible_since > start_timeout_s
    )
    if overdue:
        assert job.eligible_since is not None and now is not None
        waited = now - job.eligible_since
        reason = (
            f"released onto {','.join(job.required_nodes) or 'its nodes'} {waited:.0f} s ago, Slurm has not "
            f"started it ({reason or 'not yet evaluated'}; settings.start_timeout_s={start_timeout_s:g})"
        )
        return BackendJob(
            job_id=job_id, external_id=job.slurm_id, state=BackendJobState.PENDING, reason=reason
        )
    if job.starting:
        return BackendJob(
            job_id=job_id,
            external_id=job.slurm_id,
            state=BackendJobState.RUNNING,
            nodes=tuple((node, job.gpus_per_node) for node in job.required_nodes),
            reason=f"starting: waiting for Slurm's scheduler ({reason or 'not yet evaluated'})",
        )
    if state is BackendJobState.PENDING and job.held and not reason:
        reason = "held"
    # A pending job holds no nodes; Slurm's start time for it is only a forecast.
    ran = state is not BackendJobState.PENDING and bool(job.nodes)
    return BackendJob(
        job_id=job_id,
        external_id=job.slurm_id,
        state=state,
        nodes=tuple((node, job.gpus_per_node) for node in job.nodes) if ran else (),
        started_at=job.start_time if ran else None,
        finished_at=job.end_time if ended else None,
        exit_code=exit_code_from_status(job.exit_status) if ended and job.exit_status is not None else None,
        reason=reason,
        held=state is BackendJobState.PENDING and (job.held or job.state == "REQUEUE_HOLD"),
    )


def transient_message(message: str) -> bool:
    """Does this command output say that slurmctld (or munge, or ssh) could not be reached?"""
    lowered = message.lower()
    return any(pattern in lowered for pattern in TRANSIENT_MESSAGES)


def validate_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The Cluster row's JSON merged over the defaults; unknown keys and bad values are
    refused with a PermanentBackendError naming ``settings.<key>`` and the value."""
    if not isinstance(settings, Mapping):
        raise PermanentBackendError(f"settings: expected a JSON object, got {settings!r}")
    unknown = sorted(set(settings) - set(SETTINGS_DEFAULTS))
    if unknown:
        given = ", ".join(f"settings.{key}={settings[key]!r}" for key in unknown)
        raise PermanentBackendError(
            f"unknown setting(s) {given}; known: {', '.join(sorted(SETTINGS_DEFAULTS))}"
        )
    merged = {**SETTINGS_DEFAULTS, **settings}

    def bad(key: str, expected: str) -> PermanentBackendError:
        return PermanentBackendError(f"settings.{key}: expected {expected}, got {merged[key]!r}")

    for key in (
        "bin_dir",
        "job_name_prefix",
        "partition",
        "account",
        "instance_type_feature_prefix",
        "workdir",
        "output",
    ):
        if not isinstance(merged[key], str):
            raise bad(key, "a string")
    timeout = merged["timeout_s"]
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        raise bad("timeout_s", "a number of seconds in (0, 3600]")
    start_timeout = merged["start_timeout_s"]
    if (
        isinstance(start_timeout, bool)
        or not isinstance(start_timeout, int | float)
        or not 0 < start_timeout <= 86400
    ):
        raise bad("start_timeout_s", "a number of seconds in (0, 86400]")
    for key in ("command_prefix", "partitions", "extra_sbatch_args"):
        value = merged[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise bad(key, "a list of non-empty strings")
    if not merged["job_name_prefix"] or not NAME_RE.match(merged["job_name_prefix"]):
        raise bad("job_name_prefix", "letters, digits, '.', '_' or '-'")
    node_types = merged["node_instance_types"]
    if not isinstance(node_types, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in node_types.items()
    ):
        raise bad("node_instance_types", "an object of node name -> instance type")
    teams = merged["teams"]
    if not isinstance(teams, Mapping):
        raise bad("teams", "an object of team name -> {partition, account}")
    for team, mapping in teams.items():
        if not isinstance(mapping, Mapping) or set(mapping) - {"partition", "account"}:
            raise PermanentBackendError(
                f"settings.teams.{team}: expected an object with keys partition and/or account, got {mapping!r}"
            )
        for key, value in mapping.items():
            if not isinstance(value, str):
                raise PermanentBackendError(f"settings.teams.{team}.{key}: expected a string, got {value!r}")
    return merged


# --- the backend ------------------------------------------------------------------------------


@register
class SlurmBackend(ClusterBackend):
    """Drive a Slurm cluster through ``sbatch``, ``scontrol``, ``squeue``, ``sinfo``, ``scancel``.

    Settings (all optional, see docs/slurm.md): ``bin_dir``, ``command_prefix`` (e.g.
    ``["ssh", "slurm-login"]``), ``timeout_s``, ``job_name_prefix``, ``partition`` and
    ``account`` (defaults; ``{team}`` is replaced by the team's name), ``teams`` (per-team
    ``partition``/``account``), ``partitions`` (only list these partitions' nodes),
    ``node_instance_types`` (node -> instance type, over Features),
    ``instance_type_feature_prefix``, ``workdir``, ``output``, ``extra_sbatch_args``,
    ``start_timeout_s`` (how long a released copy may wait for Slurm to start it).
    """

    kind = "slurm"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        super().__init__(settings)
        self.config = validate_settings(settings)
        self.prefix: str = self.config["job_name_prefix"]
        # The ``squeue --json`` that ``list_nodes`` read, handed to the ``list_jobs`` right
        # after it (the loop's sync calls them in a row) instead of a second read.
        self._squeue: dict[str, Any] | None = None
        # The GPUs of each node, as that ``list_nodes`` read them (see ``list_jobs``).
        self._capacity: dict[str, int] | None = None

    # 1. Running commands ---------------------------------------------------------------------

    def argv(self, command: str, *args: str) -> list[str]:
        """The argv that runs ``command args`` here, or through ``settings.command_prefix``.

        ssh hands its arguments to the remote shell as one string, so behind ssh every
        argument is shell-quoted (``--wrap=sleep 60; echo done`` must stay one argument).
        """
        binary = f"{self.config['bin_dir'].rstrip('/')}/{command}" if self.config["bin_dir"] else command
        prefix: list[str] = self.config["command_prefix"]
        if prefix and os.path.basename(prefix[0]) == "ssh":
            return [*prefix, shlex.quote(binary), *(shlex.quote(arg) for arg in args)]
        return [*prefix, binary, *args]

    def _run(self, command: str, *args: str) -> str:
        """Run one Slurm command and return its stdout.

        Raises TransientBackendError when slurmctld cannot be reached or the command times
        out, PermanentBackendError (with Slurm's message) when it refuses the request.
        """
        if command not in ("sinfo", "squeue"):
            self._squeue = None  # a change: what squeue said before it is stale
        argv = self.argv(command, *args)
        timeout = float(self.config["timeout_s"])
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise TransientBackendError(
                f"`{' '.join(argv)}` did not answer within {timeout:g} s (settings.timeout_s)"
            ) from exc
        except FileNotFoundError as exc:
            raise PermanentBackendError(
                f"cannot run {argv[0]!r}: not found (settings.bin_dir={self.config['bin_dir']!r}, "
                f"settings.command_prefix={self.config['command_prefix']!r})"
            ) from exc
        except OSError as exc:
            raise TransientBackendError(f"cannot run `{' '.join(argv)}`: {exc}") from exc
        message = (done.stderr.strip() or done.stdout.strip())[:2000]
        if done.returncode != 0:
            # ssh exits 255 when it cannot reach the login node.
            if transient_message(message) or (self.config["command_prefix"] and done.returncode == 255):
                raise TransientBackendError(f"Slurm is unreachable: `{command} {' '.join(args)}`: {message}")
            raise PermanentBackendError(f"Slurm refused `{command} {' '.join(args)}`: {message}")
        return done.stdout

    def _json(self, command: str, *args: str) -> dict[str, Any]:
        """``<command> <args> --json``; its ``errors`` mean slurmctld could not answer.

        In 22.05 ``sinfo --json`` and ``squeue --json`` exit 0 with an "Unspecified error"
        when slurmctld is down, so a reported error is treated as unreachable.
        """
        output = self._run(command, *args, "--json")
        try:
            document = json.loads(output)
        except json.JSONDecodeError as exc:
            raise TransientBackendError(f"`{command} --json` printed no JSON: {output[:200]!r}") from exc
        if not isinstance(document, dict):
            raise TransientBackendError(
                f"`{command} --json` printed {type(document).__name__}, not an object"
            )
        errors = [e for e in document.get("errors") or [] if isinstance(e, Mapping)]
        if errors:
            text = "; ".join(
                " ".join(str(e.get(k)) for k in ("source", "description", "error") if e.get(k))
                for e in errors
            )
            raise TransientBackendError(f"`{command} --json` reported: {text}")
        return document

    # 2. Nodes ----------------------------------------------------------------------------------

    def list_nodes(self) -> list[BackendNode]:
        """Every node (of ``settings.partitions`` when set) from ``sinfo --json``.

        ``squeue --json`` says which GPUs jobs hold: GPUs Slurm counts as used beyond those
        are leaked (see ``_node``). A job that starts or ends between the two reads would look
        like a leak, so a node that seems to leak is read again and the smaller count kept.
        """
        wanted = set(self.config["partitions"])

        def read() -> list[Mapping[str, Any]]:
            raws = [r for r in self._json("sinfo").get("nodes", []) if isinstance(r, Mapping)]
            return [r for r in raws if not wanted or wanted & set(r.get("partitions") or [])]

        first = read()
        self._capacity = _node_gpus(first)
        self._squeue = self._json("squeue")
        held = held_gpus(self._squeue)
        leaks = {str(r.get("name")): leaked_gpus(r, held) for r in first}
        if any(leaks.values()):
            again = read()
            leaks = {
                str(r.get("name")): min(leaked_gpus(r, held), leaks.get(str(r.get("name")), 0)) for r in again
            }
            first = again
            self._capacity = _node_gpus(first)
        nodes = [self._node(raw, leaks.get(str(raw.get("name")), 0)) for raw in first]
        return sorted(nodes, key=lambda n: n.name)

    def _node(self, raw: Mapping[str, Any], leaked: int | None = None) -> BackendNode:
        """One node of ``sinfo --json``; a node whose type or GPUs cannot be read is down.

        ``leaked``: the GPUs Slurm counts as used that no job holds (``leaked_gpus``); by
        default, those of a node where no job holds a CPU.
        """
        name = str(raw.get("name") or raw.get("hostname") or "")
        state = node_state(raw.get("state") or "UNKNOWN", raw.get("state_flags") or [])
        reason = str(raw.get("reason") or "")
        try:
            gpus = gres_gpus(str(raw.get("gres") or ""))
            partitions = tuple(sorted(gres_partitions(str(raw.get("gres") or "")).items()))
        except ValueError as exc:
            return BackendNode(name, "", 0, NodeState.DOWN, f"gpugov: {exc}")
        instance_type = self._instance_type(name, str(raw.get("features") or ""))
        node = self._node_state(raw, name, instance_type, gpus, state, reason, leaked)
        # What Slurm says the node has beyond GPUs: CPUs, RealMemory (MiB) and typed gres.
        cpus, memory_mib = _number(raw.get("cpus")), _number(raw.get("real_memory"))
        return dataclasses.replace(
            node,
            vcpus=int(cpus) if cpus is not None else None,
            memory_gib=int(memory_mib) // 1024 if memory_mib is not None else None,
            partitions=partitions,
        )

    def _node_state(
        self,
        raw: Mapping[str, Any],
        name: str,
        instance_type: str,
        gpus: int,
        state: NodeState,
        reason: str,
        leaked: int | None,
    ) -> BackendNode:
        """The node's state as gpugov sees it: Slurm's, unless its GRES leaked or it has no
        instance type."""
        if leaked is None:
            leaked = leaked_gpus(raw, {})
        if leaked and state is NodeState.READY and not _number(raw.get("alloc_cpus")):
            # Slurm 22.05 can leave a node so when slurmctld restarts while jobs are requeued
            # (docs/chaos.md, fault 4): the GPUs stay counted as used with no job on the node,
            # and Slurm refuses every job there, so a job placed on it would wait forever. Down
            # until an administrator clears it.
            return BackendNode(
                name,
                instance_type,
                gpus,
                NodeState.DOWN,
                f"gpugov: Slurm counts {leaked} GPU(s) of this node in use with no job on it "
                "(leaked GRES; `scontrol reconfigure` clears it)",
            )
        if leaked and state is NodeState.READY:
            # The same beside jobs that still run there: they go on, nothing new is placed
            # there (a job placed on the leaked GPUs would wait for them forever).
            return BackendNode(
                name,
                instance_type,
                gpus,
                NodeState.DRAINING,
                f"gpugov: Slurm counts {leaked} GPU(s) of this node in use that no job holds "
                "(leaked GRES; `scontrol reconfigure` clears it)",
            )
        if not instance_type:
            return BackendNode(
                name,
                "",
                gpus,
                NodeState.DOWN,
                f"gpugov: no instance type: add a Feature starting with "
                f"{self.config['instance_type_feature_prefix']!r} or map it in settings.node_instance_types",
            )
        return BackendNode(name, instance_type, gpus, state, reason)

    def _instance_type(self, name: str, features: str) -> str:
        """settings.node_instance_types[name], else the Feature with the configured prefix,
        else the node's only Feature."""
        mapped: str | None = self.config["node_instance_types"].get(name)
        if mapped:
            return mapped
        found = [f.strip() for f in features.split(",") if f.strip() and f.strip() != "(null)"]
        prefix = self.config["instance_type_feature_prefix"]
        prefixed = [f for f in found if prefix and f.startswith(prefix)]
        if prefixed:
            return prefixed[0]
        return found[0] if len(found) == 1 else ""

    # 3. Jobs -------------------------------------------------------------------------------------

    def _copies(self, reuse: bool = False) -> dict[str, list[SlurmJob]]:
        """gpugov's jobs known to slurmctld, by gpugov job id, oldest Slurm job first; with
        ``reuse``, from the ``squeue`` that ``list_nodes`` read just before, if any."""
        document = (self._squeue if reuse else None) or self._json("squeue")
        self._squeue = None
        copies: dict[str, list[SlurmJob]] = {}
        for job in parse_squeue_json(document, self.prefix):
            if job.name.startswith(self.prefix) and len(job.name) > len(self.prefix):
                copies.setdefault(job.name[len(self.prefix) :], []).append(job)
        for jobs in copies.values():
            jobs.sort(key=lambda j: _slurm_id_key(j.slurm_id))
        return copies

    def list_jobs(self) -> list[BackendJob]:
        """One entry per gpugov job: its newest live copy, else its newest ended one.

        A copy counted as running while it waits for Slurm's scheduler (``backend_job``) is
        counted so only where it fits beside the gpugov jobs that do hold GPUs on its nodes:
        the jobs reported running never hold more GPUs than a node has (see ``within_nodes``).
        """
        capacity = self._capacity
        self._capacity = None
        copies = self._copies(reuse=True)
        if capacity is None:
            capacity = _node_gpus(r for r in self._json("sinfo").get("nodes", []) if isinstance(r, Mapping))
        current: dict[str, SlurmJob] = {}
        result = []
        for job_id, jobs in sorted(copies.items()):
            current[job_id] = _current(jobs)
            seen = backend_job(job_id, current[job_id], time.time(), float(self.config["start_timeout_s"]))
            if seen.held and any(_runnable(copy) for copy in jobs):
                # An older copy (left by a crash inside ``start``) could still start by itself.
                seen = dataclasses.replace(seen, held=False)
            result.append(seen)
        return within_nodes(result, current, capacity)

    def _job_copies(self, job_id: str) -> list[SlurmJob]:
        return self._copies().get(job_id, [])

    def start(self, job: JobSpec, nodes: tuple[tuple[str, int], ...]) -> str:
        """Run ``job`` on exactly ``nodes``; idempotent (see the module docstring).

        1. A copy that runs, or was released onto these same nodes and waits for Slurm's
           scheduler, is the job: return its id. An ended copy means the job ran: its id too.
        2. Otherwise (no copy; held copies: preempted, or a crash after ``sbatch -H``; a copy
           Slurm requeued itself; a released copy on other nodes) submit a fresh held copy on
           these nodes, cancel the other live copies, and release it.
        """
        per_node = self._validate_start(job, nodes)
        copies = self._job_copies(job.job_id)
        # 1. Already started (or ended): never a second copy.
        live = [c for c in copies if JOB_STATES.get(c.state) in LIVE_STATES]
        wanted = sorted(name for name, _ in nodes)
        for copy in reversed(live):
            if JOB_STATES[copy.state] is BackendJobState.RUNNING:
                return copy.slurm_id
            released = copy.state == "PENDING" and not copy.held and copy.restarts == 0
            if released and sorted(copy.required_nodes) == wanted and copy.gpus_per_node == per_node:
                return copy.slurm_id
        if copies and not live:
            return copies[-1].slurm_id
        # 2. Fresh copy, held, then retire the old held copies, then release.
        slurm_id = self._submit(job, nodes, per_node)
        for copy in live:
            self._scancel(copy.slurm_id)
        self._run("scontrol", "release", slurm_id)
        return slurm_id

    def _validate_start(self, job: JobSpec, nodes: tuple[tuple[str, int], ...]) -> int:
        """Refuse what Slurm cannot express; returns the GPUs per node (0 for a job of
        partitions alone)."""
        if not isinstance(job.job_id, str) or not NAME_RE.match(job.job_id):
            raise PermanentBackendError(
                f"job.job_id: expected letters, digits, '.', '_' or '-', got {job.job_id!r}"
            )
        if not nodes:
            raise PermanentBackendError(
                f"nodes: job {job.job_id} needs at least one (node, gpus), got {nodes!r}"
            )
        names = [n for n, _ in nodes]
        for name, gpus in nodes:
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise PermanentBackendError(f"nodes: bad node name {name!r} in {nodes!r}")
            lowest = 0 if job.partitions_per_node else 1  # partitions alone: no whole GPU
            if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < lowest:
                raise PermanentBackendError(f"nodes: bad GPU count {gpus!r} for node {name!r}")
        for profile, count in job.partitions_per_node:
            try:
                gres_type_of_profile(profile)
            except ValueError as exc:
                raise PermanentBackendError(f"job.partitions_per_node: {exc}") from exc
            if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
                raise PermanentBackendError(f"job.partitions_per_node: bad count {count!r} for {profile!r}")
        if len(set(names)) != len(names):
            raise PermanentBackendError(f"nodes: a node appears twice in {nodes!r}")
        counts = {g for _, g in nodes}
        if len(counts) != 1:
            # POLICY.md section 1: a job larger than one node takes whole nodes, so the engine
            # never asks for this; one Slurm job has one --gres per node.
            raise PermanentBackendError(f"nodes: Slurm needs the same GPUs on every node, got {nodes!r}")
        if sum(g for _, g in nodes) != job.gpus:
            raise PermanentBackendError(
                f"nodes: {nodes!r} hold {sum(g for _, g in nodes)} GPUs but job.gpus is {job.gpus}"
            )
        if not job.command and not job.duration_s:
            raise PermanentBackendError(f"job.command: job {job.job_id} has no command and no duration_s")
        if job.duration_s is not None and (isinstance(job.duration_s, bool) or job.duration_s <= 0):
            raise PermanentBackendError(f"job.duration_s: expected a positive number, got {job.duration_s!r}")
        for field_name in ("team", "image", "instance_type"):
            value = getattr(job, field_name)
            if "," in value or "\n" in value:
                raise PermanentBackendError(f"job.{field_name}: no ',' or newline allowed, got {value!r}")
        return counts.pop()

    def _submit(self, job: JobSpec, nodes: tuple[tuple[str, int], ...], per_node: int) -> str:
        """``sbatch -H`` pinned to ``nodes``; returns the Slurm job id."""
        team_map = self.config["teams"].get(job.team, {})
        partition = team_map.get("partition", self.config["partition"]).replace("{team}", job.team)
        account = team_map.get("account", self.config["account"]).replace("{team}", job.team)
        args = [
            f"--job-name={self.prefix}{job.job_id}",
            f"--nodelist={','.join(n for n, _ in nodes)}",
            f"--nodes={len(nodes)}",
            f"--gres={self._gres(job, nodes, per_node)}",
            f"--chdir={self.config['workdir']}",
            f"--output={self.config['output']}",
            # The job's identity travels in its environment, for the site's command or image.
            f"--export=ALL,GPUGOV_JOB_ID={job.job_id},GPUGOV_TEAM={job.team},"
            f"GPUGOV_INSTANCE_TYPE={job.instance_type},GPUGOV_IMAGE={job.image}",
        ]
        if job.vcpus_per_node:
            # One task per node (sbatch's default), so per task is per node.
            args.append(f"--cpus-per-task={job.vcpus_per_node}")
        if job.memory_gib_per_node:
            args.append(f"--mem={job.memory_gib_per_node}G")  # per node
        if partition:
            args.append(f"--partition={partition}")
        if account:
            args.append(f"--account={account}")
        if job.duration_s:
            # Slurm counts time limits in whole minutes.
            args.append(f"--time={max(1, math.ceil(job.duration_s / 60))}")
        args.extend(self.config["extra_sbatch_args"])
        command = job.command or f"sleep {int(job.duration_s or 0)}"
        args.append(f"--wrap={command}")
        # A held submission skips Slurm's checks (an impossible request would pend forever
        # as BadConstraints), so ask first: --test-only refuses exactly what sbatch would.
        self._run("sbatch", "--test-only", *args)
        output = self._run("sbatch", "--parsable", "--hold", *args).strip()
        slurm_id = output.split(";")[0].strip()
        if not slurm_id.isdigit():
            raise PermanentBackendError(f"sbatch printed {output!r}, not a job id")
        return slurm_id

    def _gres(self, job: JobSpec, nodes: tuple[tuple[str, int], ...], per_node: int) -> str:
        """``--gres`` of one node: ``gpu:N`` as always for a job of GPUs alone. A job that asks
        more names each partition's type (``gpu:1g.5gb:3``), and its whole GPUs by the nodes'
        whole-GPU type when they have partitions too: an untyped ``gpu:N`` could be given
        partitions there."""
        if job.counts_gpus_only:
            return f"gpu:{per_node}"
        entries = [f"gpu:{gres_type_of_profile(p)}:{count}" for p, count in job.partitions_per_node]
        if per_node:
            entries.insert(0, f"gpu:{self._whole_type(nodes)}{per_node}")
        return ",".join(entries)

    def _whole_type(self, nodes: tuple[tuple[str, int], ...]) -> str:
        """``<type>:`` of the nodes' whole GPUs when they have partitions too, else ``""``;
        read with ``sinfo -N -n <nodes> -o '%N|%G'``."""
        output = self._run("sinfo", "-h", "-N", "-n", ",".join(n for n, _ in nodes), "-o", "%N|%G")
        types: set[str] = set()
        cut = False
        for line in output.splitlines():
            name, _, gres = line.partition("|")
            try:
                cut = cut or bool(gres_partitions(gres))
                types |= whole_gpu_types(gres)
            except ValueError as exc:
                raise PermanentBackendError(f"node {name}: {exc}") from exc
        if not cut:
            return ""
        if len(types) != 1 or "" in types:
            raise PermanentBackendError(
                f"nodes {','.join(n for n, _ in nodes)}: whole GPUs beside partitions need one GPU "
                f"type in Slurm's Gres to be asked for apart from them, got {sorted(types)!r}"
            )
        return f"{types.pop()}:"

    def _scancel(self, slurm_id: str) -> None:
        try:
            self._run("scancel", slurm_id)
        except PermanentBackendError as exc:
            if not _already_ended(str(exc)):
                raise

    def preempt(self, job_id: str) -> bool:
        """Requeue the job held (progress lost); a pending copy is held. False (nothing
        preempted) when no copy is live, or when Slurm answers that the running one is already
        completing: it ends by itself, and holds its GPUs until it has."""
        pending = ended = False
        for copy in self._job_copies(job_id):
            state = JOB_STATES.get(copy.state)
            if state is BackendJobState.RUNNING:
                try:
                    self._run("scontrol", "requeuehold", copy.slurm_id)
                except PermanentBackendError as exc:
                    # It ended, or was requeued, between squeue and now.
                    if "pending" not in str(exc).lower():
                        if not _already_ended(str(exc)):
                            raise
                        ended = True
                        continue
                    self._run("scontrol", "hold", copy.slurm_id)
                pending = True
            elif state is BackendJobState.PENDING:
                if not copy.held:
                    self._run("scontrol", "hold", copy.slurm_id)
                pending = True
        return pending and not ended

    def signal(self, job_id: str) -> bool:
        """``scancel --signal=TERM --full`` on the running copy: SIGTERM to the batch shell and
        to every process of the job (``--batch`` would reach the shell alone, which waits for
        its command before it handles a signal), which keeps its nodes. The grace is gpugov's
        (docs/slurm.md "Preemption grace"): after it, ``preempt`` requeues the job held. A
        released copy Slurm has not started yet has nothing to signal and still counts as
        running (True); no live copy, or one already completing: False."""
        copies = self._job_copies(job_id)
        running = [c for c in copies if JOB_STATES.get(c.state) is BackendJobState.RUNNING]
        for copy in running:
            if copy.state == "COMPLETING":
                return False
            try:
                self._run("scancel", "--signal=TERM", "--full", copy.slurm_id)
            except PermanentBackendError as exc:
                if not _already_ended(str(exc)):
                    raise
                return False
        # Without a running copy: released onto its nodes and waiting for Slurm's scheduler,
        # which gpugov counts as running.
        return bool(running) or any(
            JOB_STATES.get(c.state) is BackendJobState.PENDING and not c.held for c in copies
        )

    def cancel(self, job_id: str) -> None:
        """``scancel`` every live copy; ended or unknown: no-op."""
        for copy in self._job_copies(job_id):
            if JOB_STATES.get(copy.state) in LIVE_STATES:
                self._scancel(copy.slurm_id)

    def health(self) -> None:
        """``scontrol ping``: TransientBackendError unless slurmctld answers UP."""
        try:
            output = self._run("scontrol", "ping")
        except PermanentBackendError as exc:
            raise TransientBackendError(str(exc)) from exc
        if "UP" not in output:
            raise TransientBackendError(f"slurmctld is not up: {output.strip()}")


def within_nodes(
    reports: list[BackendJob], copies: Mapping[str, SlurmJob], capacity: Mapping[str, int]
) -> list[BackendJob]:
    """``reports`` with every copy that waits for Slurm's scheduler and does not fit on its
    nodes reported pending instead of running.

    Slurm never lets the jobs it runs hold more GPUs than a node has, but a released copy that
    waits is counted as running on the nodes it was released onto, and those may still be held
    by another gpugov job that Slurm runs: one whose preemption found it already completing
    (it then ends by itself, and gpugov has started its preemptor there), or one a lost commit
    or a second cycle left there. Counting both would tell the loop that the node holds more
    than it has (the chaos run's "node4 holds 16 GPUs of its 8", docs/chaos.md item 7). So the
    copies Slurm runs are counted first, then the waiting ones, oldest release first, each only
    where it fits; one that does not is pending, and the loop holds it and places it again. A
    node whose GPUs are not known (``capacity``) is not judged.
    """
    used: dict[str, int] = {}
    holders: dict[str, list[str]] = {}
    waiting: list[tuple[float, tuple[int, str], int]] = []
    for index, seen in enumerate(reports):
        if seen.state is not BackendJobState.RUNNING:
            continue
        copy = copies.get(seen.job_id)
        if copy is not None and copy.starting:
            waiting.append((copy.eligible_since or 0.0, _slurm_id_key(copy.slurm_id), index))
            continue
        for node, gpus in seen.nodes:
            used[node] = used.get(node, 0) + gpus
            holders.setdefault(node, []).append(seen.job_id)
    result = list(reports)
    for _, _, index in sorted(waiting):
        seen = result[index]
        full = [
            (node, gpus)
            for node, gpus in seen.nodes
            if node in capacity and used.get(node, 0) + gpus > capacity[node]
        ]
        if not full:
            for node, gpus in seen.nodes:
                used[node] = used.get(node, 0) + gpus
                holders.setdefault(node, []).append(seen.job_id)
            continue
        node, gpus = full[0]
        reason = (
            f"released onto {','.join(n for n, _ in seen.nodes)}, but gpugov jobs Slurm runs there "
            f"({', '.join(holders.get(node, [])) or 'none'}) hold {used.get(node, 0)} of {node}'s "
            f"{capacity[node]} GPUs and it needs {gpus}; Slurm has not started it"
        )
        result[index] = BackendJob(
            job_id=seen.job_id, external_id=seen.external_id, state=BackendJobState.PENDING, reason=reason
        )
    return result


def _node_gpus(raw_nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The GPUs of each node of ``sinfo --json`` whose ``gres`` can be read."""
    capacity = {}
    for raw in raw_nodes:
        name = str(raw.get("name") or raw.get("hostname") or "")
        try:
            capacity[name] = gres_gpus(str(raw.get("gres") or ""))
        except ValueError:
            continue
    return capacity


def _slurm_id_key(slurm_id: str) -> tuple[int, str]:
    head = slurm_id.split("_")[0].split("+")[0]
    return (int(head) if head.isdigit() else -1, slurm_id)


def _runnable(job: SlurmJob) -> bool:
    """A pending copy Slurm may start by itself (released, not requeued held)."""
    return job.state == "PENDING" and not job.held


def _current(jobs: list[SlurmJob]) -> SlurmJob:
    """The copy that speaks for a gpugov job: the newest live one, else the newest."""
    live = [j for j in jobs if JOB_STATES.get(j.state) in LIVE_STATES]
    return (live or jobs)[-1]


def _already_ended(message: str) -> bool:
    """Slurm's refusals that mean "this job is ending or gone": nothing left to stop."""
    lowered = message.lower()
    return any(
        text in lowered
        for text in (
            "already completing or completed",
            "invalid job id",
            "transitional state",
            "already finished",
        )
    )
