"""SigV4 as the server checks it (allocations/interop/sigv4.py), against botocore's own signer:
the signature botocore computes for a request is the one the server recomputes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from allocations.interop import sigv4

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def signed_request(body: bytes = b'{"MaxResults": 3}', path: str = "/aws/sagemaker/") -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=f"http://127.0.0.1:8000{path}",
        data=body,
        headers={"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "SageMaker.ListComputeQuotas"},
    )
    SigV4Auth(Credentials("GKIAEXAMPLEEXAMPLE00", SECRET), "sagemaker", "us-west-2").add_auth(request)
    return request


def recompute(request: AWSRequest, *, secret: str = SECRET, body: bytes | None = None) -> tuple[str, str]:
    auth = sigv4.parse_authorization(request.headers["Authorization"])
    headers = {name.lower(): value for name, value in request.headers.items()}
    headers["host"] = "127.0.0.1:8000"
    canonical = sigv4.canonical_request(
        method="POST",
        path="/aws/sagemaker/",
        query_string="",
        headers=headers,
        signed=auth.signed_headers,
        body=request.body if body is None else body,
    )
    expected = sigv4.expected_signature(
        secret=secret, auth=auth, amz_date=request.headers["X-Amz-Date"], canonical=canonical
    )
    return expected, auth.signature


def test_the_server_recomputes_botocores_signature() -> None:
    expected, given = recompute(signed_request())
    assert expected == given


def test_a_changed_body_or_secret_changes_the_signature() -> None:
    request = signed_request()
    assert len({recompute(request, body=b'{"MaxResults": 4}')[0], recompute(request)[1]}) == 2
    assert len({recompute(request, secret=SECRET[:-1] + "X")[0], recompute(request)[1]}) == 2


def test_the_authorization_header_is_read_into_its_scope() -> None:
    auth = sigv4.parse_authorization(signed_request().headers["Authorization"])
    assert (auth.access_key_id, auth.region, auth.service) == (
        "GKIAEXAMPLEEXAMPLE00",
        "us-west-2",
        "sagemaker",
    )
    assert "host" in auth.signed_headers and "x-amz-date" in auth.signed_headers


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("", "MissingAuthenticationTokenException"),
        ("Bearer abc", "IncompleteSignatureException"),
        (
            "AWS4-HMAC-SHA256 Credential=K/20261207/us-west-2/sagemaker/aws4_request",
            "IncompleteSignatureException",
        ),
        ("AWS4-HMAC-SHA256 Credential=K/x, SignedHeaders=host, Signature=00", "IncompleteSignatureException"),
    ],
)
def test_a_malformed_authorization_header_names_what_is_missing(header: str, code: str) -> None:
    with pytest.raises(sigv4.SignatureProblem) as caught:
        sigv4.parse_authorization(header)
    assert caught.value.code == code


def test_fifteen_minutes_of_skew_either_way_is_the_limit() -> None:
    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    for minutes in (-15, 0, 15):
        sigv4.request_time((now + timedelta(minutes=minutes)).strftime(sigv4.TIMESTAMP_FORMAT), now)
    for minutes in (-16, 16):
        with pytest.raises(sigv4.SignatureProblem) as caught:
            sigv4.request_time((now + timedelta(minutes=minutes)).strftime(sigv4.TIMESTAMP_FORMAT), now)
        assert caught.value.code == "InvalidSignatureException"
        assert caught.value.message.startswith("Signature expired:")


def test_a_date_that_is_not_amz_date_is_named() -> None:
    with pytest.raises(sigv4.SignatureProblem) as caught:
        sigv4.request_time("yesterday", datetime.now(UTC))
    assert "'yesterday'" in caught.value.message
