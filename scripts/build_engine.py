#!/usr/bin/env python
"""Compile the allocation engine with mypyc into build/engine/ (allocations/engine/compiled.py).

    .venv/bin/python scripts/build_engine.py [--force]

Does nothing when the build is up to date. A machine without a C compiler or Python's headers
keeps the interpreted engine: the build says which of the two is missing before mypyc starts
(not a compiler's error), or fails with the compiler's message, and ``make`` goes on unless
CI=true (CI tests the build users run)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from allocations.engine import compiled  # noqa: E402


def missing_tools() -> str | None:
    """What a build needs and this machine lacks (the C compiler setuptools would call, or
    ``Python.h``), or None."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(cc)
    if not words or shutil.which(words[0]) is None:
        return f"no C compiler: {words[0] if words else cc!r} is not on PATH, and CC names no other"
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        return f"no Python headers: {include / 'Python.h'} is missing; the python3-dev package has them"
    return None


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    paths = [f"allocations/engine/{name}.py" for name in compiled.MODULES]
    digest = compiled.source_digest()
    with tempfile.TemporaryDirectory(prefix="gpugov-engine-") as tmp:
        out = Path(tmp) / "lib"
        os.chdir(REPO)
        extensions = mypycify(
            paths, opt_level="3", group_name=compiled.GROUP, target_dir=str(Path(tmp) / "c")
        )
        setup(
            name="gpugov-engine",
            ext_modules=extensions,
            packages=[],
            py_modules=[],
            script_args=[
                "--quiet",
                "build_ext",
                "--build-lib",
                str(out),
                "--build-temp",
                str(Path(tmp) / "o"),
            ],
        )
        # Swap the new build in whole: the old one (if any) stays usable until this point.
        fresh = compiled.BUILD_ROOT.with_name("engine.new")
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.copytree(out, fresh)
        (fresh / "stamp.json").write_text(
            json.dumps({"digest": digest, "modules": list(compiled.MODULES)}) + "\n"
        )
        shutil.rmtree(compiled.BUILD_ROOT, ignore_errors=True)
        fresh.rename(compiled.BUILD_ROOT)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--force", action="store_true", help="build even when the build is up to date")
    args = parser.parse_args()
    if not args.force and compiled.stale_reason() is None:
        print(f"build-engine: {compiled.BUILD_ROOT} is up to date")
        return 0
    missing = missing_tools()
    if missing is not None:
        print(f"build-engine: cannot build, {missing}. The engine runs from its sources.", file=sys.stderr)
        return 1
    started = time.monotonic()
    print("build-engine: compiling the engine with mypyc (about a minute)", flush=True)
    try:
        build()
    except (Exception, SystemExit) as exc:  # a compiler error is a SystemExit from setuptools
        print(f"build-engine: the build failed ({exc}); the engine runs from its sources", file=sys.stderr)
        return 1
    print(f"build-engine: built {compiled.BUILD_ROOT} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
