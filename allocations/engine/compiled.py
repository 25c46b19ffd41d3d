"""Which build of the engine runs: the sources, or the same sources compiled by mypyc.

The engine is plain, fully typed Python (``mypy --strict``), and mypyc compiles those very
modules to C extensions whose cycles run up to 1.6 times as fast (``docs/engine.md``, Two
builds). ``make`` builds them into ``build/engine/`` (``scripts/build_engine.py``), beside the
sources, never over them, with a stamp that holds the digest of the sources it compiled. The
package's ``__init__`` puts that build first on its ``__path__`` only while the stamp matches
the sources of this checkout and this interpreter, so an edited module is never shadowed by
a stale build: the sources run until the next ``make``.

``GPUGOV_ENGINE`` chooses: ``auto`` (the default: the build when it is up to date),
``interpreted`` (always the sources) or ``compiled`` (the build, or ``ImportError`` saying
why not). ``allocations.engine.BUILD`` says which one runs.

This module is never compiled itself (it chooses), nor is ``snapshot.py``: its dataclasses
are what callers build, pickle and ``dataclasses.replace``, and they stay ordinary classes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_ROOT = PACKAGE_DIR.parent.parent / "build" / "engine"
STAMP = BUILD_ROOT / "stamp.json"
# The modules mypyc compiles, as one group (calls between them go straight through C).
MODULES = (
    "accounting",
    "cost",
    "cycle",
    "memory",
    "placement",
    "preemption",
    "ranking",
    "resources",
    "session",
    "state",
)
GROUP = "allocations.engine.compiled_group"
# Their digest also covers the module they take their types from: mypyc compiles each read of
# a ``Snapshot`` field as a check of the type it declares, so a build made before that type
# changed would refuse the new one.
TYPES_FROM = ("snapshot",)
CHOICES = ("auto", "interpreted", "compiled")


def source_digest() -> str:
    """The digest of what a build is made from: the compiled modules' sources, and the
    interpreter that can load it."""
    digest = hashlib.sha256()
    digest.update(f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}".encode())
    for name in MODULES + TYPES_FROM:
        digest.update(name.encode() + b"\0")
        digest.update((PACKAGE_DIR / f"{name}.py").read_bytes())
    return digest.hexdigest()


def stale_reason() -> str | None:
    """Why the build in ``build/engine/`` cannot be used here, or None when it can."""
    try:
        stamp = json.loads(STAMP.read_text())
    except FileNotFoundError:
        return f"no compiled build in {BUILD_ROOT}: make builds it"
    except (OSError, ValueError) as exc:
        return f"the build's stamp {STAMP} cannot be read: {exc}"
    if not isinstance(stamp, dict) or stamp.get("digest") != source_digest():
        return "the compiled build is older than the sources: make builds it again"
    return None


def choice() -> str:
    value = os.environ.get("GPUGOV_ENGINE", "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ImportError(f"GPUGOV_ENGINE: must be one of {', '.join(CHOICES)}, got {value!r}")
    return value


def package_path() -> str | None:
    """The directory to put first on ``allocations.engine.__path__``, or None for the sources.
    Raises ``ImportError`` when ``GPUGOV_ENGINE=compiled`` and the build cannot be used."""
    wanted = choice()
    if wanted == "interpreted":
        return None
    reason = stale_reason()
    if reason is None:
        return str(BUILD_ROOT / "allocations" / "engine")
    if wanted == "compiled":
        raise ImportError(f"GPUGOV_ENGINE=compiled, but {reason}")
    return None
