"""No secret in the repository: every tracked file (``git ls-files``) is searched for private
keys, cloud and API keys and passwords written into code or docs. The known, harmless hits are
listed (the test personas' password, made-up values of the tests) so that a new one fails."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO

PATTERNS = {
    "private key": re.compile(r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY-----"),
    "AWS access key id": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "AWS secret access key": re.compile(r"aws_secret_access_key\s*[:=]\s*\S{20,}", re.I),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    "Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    "password or secret key in a literal": re.compile(
        r"""(?ix)(?:password|passwd|secret[_-]?key|api[_-]?key)["']?\s*[:=]\s*["'][^"'\s{}$<>…]{6,}["']"""
    ),
    "credentials in a URL": re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"$<>…]{3,}@", re.I),
}
SECRET_FILES = re.compile(r"(^|/)(\.env(\..*)?|id_(rsa|ecdsa|ed25519)|.*\.pem|.*\.p12|.*\.key|secret_key)$")

# (path, text of the hit) that are not secrets, each with its reason.
ALLOWED = {
    # The test personas' password, documented in tests/conftest.py; never a real account.
    ("tests/conftest.py", 'PASSWORD = "pw-for-tests-only"'),
}
# The convention for any other password a test makes up: under tests/, ending in
# "for-tests-only", so that a reader (and this scan) sees at once that it opens nothing.
TEST_PASSWORD = re.compile(r"""["'][^"']*for-tests-only["']""")


def scan(path: str, text: str) -> list[tuple[str, str, str]]:
    """(path, kind, matched text) of every suspicious line of one file."""
    hits = []
    for kind, pattern in PATTERNS.items():
        for match in pattern.finditer(text):
            line = text[text.rfind("\n", 0, match.start()) + 1 : text.find("\n", match.end())].strip()
            if path.startswith("tests/") and TEST_PASSWORD.search(match.group()):
                continue
            if not any(path == allowed_path and snippet in line for allowed_path, snippet in ALLOWED):
                hits.append((path, kind, line[:160]))
    return hits


def tracked_files() -> list[str]:
    result = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [name for name in result.stdout.decode().split("\0") if name]


def test_no_tracked_file_holds_a_secret():
    files = tracked_files()
    assert len(files) > 100  # the listing worked
    hits = []
    for name in files:
        if name.startswith("tests/security/test_no_secrets.py"):
            continue  # the patterns themselves
        path = REPO / name
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        hits.extend(scan(name, path.read_bytes().decode("utf-8", "replace")))
    assert hits == [], "\n".join(f"{p}: {kind}: {line}" for p, kind, line in hits)


def test_no_secret_file_is_tracked():
    assert [name for name in tracked_files() if SECRET_FILES.search(name)] == []


@pytest.mark.parametrize(
    "planted",
    [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "key_id = 'AKIAIOSFODNN7EXAMPLE'",
        'EMAIL_HOST_PASSWORD = "hunter2hunter2"',
        '"password": "correct-horse"',
        "DATABASE_URL=postgres://gpugov:s3cr3tpw@db.internal/gpugov",
        "token = ghp_" + "a" * 36,
    ],
)
def test_the_scan_finds_planted_secrets(planted):
    assert scan("somewhere.py", f"x = 1\n{planted}\n")


@pytest.mark.parametrize(
    "harmless",
    [
        'os.environ.get("EMAIL_HOST_PASSWORD", "")',
        "`postgres://postgres@127.0.0.1:5432/gpugov`",
        '-d \'{"username": "bob", "password": "…"}\'',
        "DATABASE_URL=postgres://gpugov:…@db.internal:5432/gpugov",
    ],
)
def test_the_scan_passes_placeholders(harmless):
    assert scan("docs/x.md", harmless) == []
