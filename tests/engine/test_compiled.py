"""The engine's two builds (``allocations/engine/compiled.py``): the sources, and the same
sources compiled by mypyc into ``build/engine/`` (``scripts/build_engine.py``, run by ``make``).

CI runs the suite once on each (``.ci/run``); these tests check that the compiled build is the
one in use where it should be, that it gives the very plans of the sources, and that a build
older than the sources is never used."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from allocations.engine import BUILD, compiled
from tests.conftest import REPO, require_service


def _require_build() -> None:
    require_service(compiled.stale_reason() is None, f"the compiled engine ({compiled.stale_reason()})")


def _run(code: str, cwd: Path, engine: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUGOV_ENGINE": engine, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


def test_the_compiled_build_runs_wherever_it_is_up_to_date() -> None:
    if compiled.choice() == "interpreted":
        assert BUILD == "interpreted"
        return  # CI's pass on the sources asks for them
    _require_build()  # in CI, a build that failed fails here
    assert BUILD == "compiled"
    import allocations.engine.cycle as cycle

    assert cycle.__file__ is not None
    assert Path(cycle.__file__).is_relative_to(compiled.BUILD_ROOT)
    assert cycle.__file__.endswith(".so")


def test_both_builds_give_the_same_plans() -> None:
    _require_build()
    code = "from tests.engine.plans_digest import main; main(400)"
    outputs = {engine: _run(code, REPO, engine) for engine in ("compiled", "interpreted")}
    for engine, out in outputs.items():
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[0] == engine
    runs = {engine: out.stdout.split()[1:] for engine, out in outputs.items()}
    assert int(runs["compiled"][0]) > 5_000  # cycles compared: enough to mean something
    assert runs["compiled"] == runs["interpreted"]


def _copy_of_the_engine(tmp_path: Path) -> Path:
    """The engine's sources and its build, in a checkout of their own."""
    _require_build()
    package = tmp_path / "allocations"
    shutil.copytree(
        REPO / "allocations" / "engine", package / "engine", ignore=shutil.ignore_patterns("__pycache__")
    )
    (package / "__init__.py").write_text("")
    shutil.copytree(compiled.BUILD_ROOT, tmp_path / "build" / "engine")
    return tmp_path


WHICH = "import allocations.engine as e, allocations.engine.state as s; print(e.BUILD, s.__file__)"


def test_a_build_older_than_the_sources_is_not_used(tmp_path: Path) -> None:
    checkout = _copy_of_the_engine(tmp_path)
    out = _run(WHICH, checkout, "auto")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("compiled ") and out.stdout.strip().endswith(".so")

    state = checkout / "allocations" / "engine" / "state.py"
    state.write_text(state.read_text() + "\n# an edit after the build\n")
    out = _run(WHICH, checkout, "auto")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["interpreted", str(state)]

    out = _run(WHICH, checkout, "compiled")
    assert out.returncode != 0
    assert "GPUGOV_ENGINE=compiled, but the compiled build is older than the sources" in out.stderr


def test_an_edit_of_the_snapshot_types_makes_the_build_older_than_the_sources(tmp_path: Path) -> None:
    """``snapshot.py`` is never compiled, but the compiled modules check the types its
    dataclasses declare when they read a field: a build made before those types changed would
    refuse what the sources accept."""
    checkout = _copy_of_the_engine(tmp_path)
    snapshot = checkout / "allocations" / "engine" / "snapshot.py"
    snapshot.write_text(snapshot.read_text() + "\n# an edit after the build\n")
    out = _run(WHICH, checkout, "auto")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("interpreted ")


def test_without_a_build_the_sources_run_and_compiled_says_why_not(tmp_path: Path) -> None:
    checkout = _copy_of_the_engine(tmp_path)
    shutil.rmtree(checkout / "build")
    out = _run(WHICH, checkout, "auto")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("interpreted ")
    out = _run(WHICH, checkout, "compiled")
    assert "GPUGOV_ENGINE=compiled, but no compiled build in" in out.stderr


def test_an_unknown_choice_names_the_variable_and_the_value() -> None:
    out = _run("import allocations.engine", REPO, "fast")
    assert out.returncode != 0
    assert "GPUGOV_ENGINE: must be one of auto, interpreted, compiled, got 'fast'" in out.stderr


def test_a_machine_without_a_compiler_keeps_its_build_and_is_told_why_at_once(tmp_path: Path) -> None:
    """``make`` tries the build on every run; without a compiler it says so before mypyc starts
    (not with the compiler's error), and leaves whatever build there is as it was."""
    checkout = _copy_of_the_engine(tmp_path)
    (checkout / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "build_engine.py", checkout / "scripts")
    stamp = checkout / "build" / "engine" / "stamp.json"
    before = stamp.read_text()
    env = {**os.environ, "CC": "gpugov-no-such-cc --quiet", "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, str(checkout / "scripts" / "build_engine.py"), "--force"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "cannot build, no C compiler: 'gpugov-no-such-cc' is not on PATH" in out.stderr
    assert "compiling" not in out.stdout  # refused before the build began
    assert stamp.read_text() == before
    assert not (checkout / "build" / "engine.new").exists()
