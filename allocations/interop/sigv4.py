"""AWS Signature Version 4, checked on the server side (no Django, no database).

The algorithm is AWS's published one ("Create a signed AWS API request"): the request's
canonical form, a string to sign that names the time and the credential scope, and an HMAC
chain keyed by ``"AWS4" + secret`` over the date, region, service and ``aws4_request``.
``parse_authorization`` reads the ``Authorization`` header; ``expected_signature`` recomputes
what the client must have sent; the caller compares the two with ``hmac.compare_digest``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
TIMESTAMP_FORMAT = "%Y%m%dT%H%M%SZ"
# AWS refuses a request signed more than 15 minutes away from its own clock.
MAX_SKEW = timedelta(minutes=15)
_FIELD = re.compile(r"\s*(Credential|SignedHeaders|Signature)\s*=\s*([^,\s]*)\s*")


class SignatureProblem(Exception):
    """A request whose signature cannot be accepted: ``code`` is AWS's error code for it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Authorization:
    """The parts of an ``Authorization: AWS4-HMAC-SHA256 ...`` header."""

    access_key_id: str
    date: str  # YYYYMMDD
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(header: str) -> Authorization:
    """The header's parts; SignatureProblem (IncompleteSignatureException) when malformed."""
    if not header:
        raise SignatureProblem(
            "MissingAuthenticationTokenException",
            "Missing Authentication Token: sign the request with SigV4.",
        )
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureProblem(
            "IncompleteSignatureException",
            f"Authorization header algorithm {algorithm!r} is not {ALGORITHM}.",
        )
    fields: dict[str, str] = {}
    for part in rest.split(","):
        match = _FIELD.fullmatch(part)
        if match:
            fields[match.group(1)] = match.group(2)
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not fields.get(name)]
    if missing:
        raise SignatureProblem(
            "IncompleteSignatureException",
            f"Authorization header requires {', '.join(missing)}: {header[:200]!r}.",
        )
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise SignatureProblem(
            "IncompleteSignatureException",
            f"Credential {fields['Credential']!r} is not <key id>/<YYYYMMDD>/<region>/<service>/aws4_request.",
        )
    signed = tuple(fields["SignedHeaders"].split(";"))
    return Authorization(scope[0], scope[1], scope[2], scope[3], signed, fields["Signature"])


def request_time(amz_date: str, now: datetime) -> datetime:
    """The time a request was signed (its ``X-Amz-Date``), checked against ``now``."""
    try:
        signed_at = datetime.strptime(amz_date, TIMESTAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise SignatureProblem(
            "IncompleteSignatureException",
            f"X-Amz-Date {amz_date!r} is missing or not YYYYMMDD'T'HHMMSS'Z'.",
        ) from exc
    if abs(now - signed_at) > MAX_SKEW:
        # AWS's JSON services answer a skewed clock with this code and wording.
        late = "earlier" if signed_at < now else "later"
        bound = now - MAX_SKEW if signed_at < now else now + MAX_SKEW
        raise SignatureProblem(
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now {late} than {bound.strftime(TIMESTAMP_FORMAT)} "
            f"({now.strftime(TIMESTAMP_FORMAT)} {'-' if signed_at < now else '+'} 15 min.)",
        )
    return signed_at


def _canonical_query(query_string: str) -> str:
    pairs = []
    for pair in query_string.split("&") if query_string else []:
        key, _, value = pair.partition("=")
        pairs.append((quote(unquote(key), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_request(
    *,
    method: str,
    path: str,
    query_string: str,
    headers: Mapping[str, str],
    signed: tuple[str, ...],
    body: bytes,
) -> str:
    """The request as SigV4 signs it. ``headers`` maps lower-case names to values."""
    lines = []
    for name in signed:
        if name not in headers:
            raise SignatureProblem(
                "IncompleteSignatureException", f"Signed header {name!r} is not in the request."
            )
        lines.append(f"{name}:{' '.join(headers[name].split())}")
    payload = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    return "\n".join(
        [
            method.upper(),
            quote(path, safe="/~"),
            _canonical_query(query_string),
            "\n".join(lines) + "\n",
            ";".join(signed),
            payload,
        ]
    )


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def expected_signature(*, secret: str, auth: Authorization, amz_date: str, canonical: str) -> str:
    """The signature the holder of ``secret`` computes for this canonical request."""
    scope = f"{auth.date}/{auth.region}/{auth.service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(f"AWS4{secret}".encode(), auth.date)
    for part in (auth.region, auth.service, "aws4_request"):
        key = _hmac(key, part)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
