"""Cluster backends: the contract (``base``) and one module per kind, registered by import."""

from allocations.backends.base import (
    REGISTRY,
    BackendError,
    BackendJob,
    BackendJobState,
    BackendNode,
    ClusterBackend,
    JobSpec,
    NodeState,
    PermanentBackendError,
    TransientBackendError,
    get_backend,
    register,
)

__all__ = [
    "REGISTRY",
    "BackendError",
    "BackendJob",
    "BackendJobState",
    "BackendNode",
    "ClusterBackend",
    "JobSpec",
    "NodeState",
    "PermanentBackendError",
    "TransientBackendError",
    "get_backend",
    "register",
]

# Each kind registers itself on import (base.register); keep this list additive.
from allocations.backends import (
    simulated,  # noqa: F401
    slurm,  # noqa: F401
)
