"""Every command in README.md and docs/*.md runs as written.

The fenced shell blocks of the README and every page of docs/ are read line by line: a
``manage.py`` command must exist and accept its arguments, a ``simulate`` of a file that the
repository holds is run (``--check`` too), a script or module named must exist (the benchmarks
and ``make`` targets take minutes: they are checked to exist, not run), a ``make`` target must
be in the Makefile; and every ``docs/examples/...`` file named anywhere in the
text exists. Placeholders (``FILE``, ``my-scenario.yaml``) are parsed, not run.
"""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest
from django.core.management import call_command, get_commands, load_command_class

from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
PYTHON = {".venv/bin/python", "python", "python3"}


def _commands() -> list[tuple[str, str]]:
    """(page, command line) for each command in a shell (or untyped) fenced block."""
    found = []
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8")):
            if lang not in {"", "sh", "bash", "shell", "console"}:
                continue
            for line in body.splitlines():
                line = line.split(" #")[0].strip()
                words = line.split()
                # Leading VAR=value assignments are the environment of the command.
                while words and re.match(r"^[A-Z_]+=", words[0]):
                    words.pop(0)
                if words and (words[0] in PYTHON | {"make", "manage.py"} or words[0].endswith("/python")):
                    found.append((page.relative_to(REPO).as_posix(), " ".join(words)))
    return found


COMMANDS = _commands()


def test_the_pages_hold_commands_at_all() -> None:
    pages = {page for page, _ in COMMANDS}
    assert {"README.md", "docs/simulation.md", "docs/whatif.md"} <= pages


def test_every_docs_examples_file_named_in_readme_or_docs_exists() -> None:
    missing = []
    for page in PAGES:
        for name in re.findall(
            r"docs/examples/[\w./-]+\.(?:ya?ml|json|csv)", page.read_text(encoding="utf-8")
        ):
            if not (REPO / name).exists():
                missing.append(f"{page.relative_to(REPO)}: {name}")
    assert not missing, missing


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_command_runs_as_written(page: str, line: str, tmp_path: Path) -> None:
    words = shlex.split(line)
    if words[0] == "make":
        targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8"), re.M))
        assert set(words[1:]) - {w for w in words[1:] if "=" in w} <= targets, line
        return
    if words[0] != "manage.py":
        words = words[1:]
    if words[0] == "-m":
        module = REPO.joinpath(*words[1].split("."))
        assert module.with_suffix(".py").exists() or (module / "__main__.py").exists(), line
        return
    if words[0] != "manage.py":
        assert (REPO / words[0]).exists(), f"{page}: {words[0]} does not exist"
        return
    name, args = words[1], words[2:]
    assert name in get_commands(), f"{page}: manage.py has no command {name!r}"
    if args and args[-1] == "...":
        args = args[:-1]
    command = load_command_class(get_commands()[name], name)
    command.create_parser("manage.py", name).parse_args(args)  # exits (fails) on a bad option
    if name != "simulate":
        return
    if args[0].startswith("docs/"):
        assert (REPO / args[0]).exists(), f"{page}: {args[0]} does not exist"
    if not (REPO / args[0]).exists():
        return  # a placeholder for the user's own file
    # Run it; a --json file goes to a temporary folder instead of the checkout.
    args = [str(REPO / args[0]), *args[1:], "--no-progress"]
    if "--json" in args and args[args.index("--json") + 1] != "-":
        args[args.index("--json") + 1] = str(tmp_path / "out.json")
    call_command(name, *args, stdout=io.StringIO(), stderr=io.StringIO())
