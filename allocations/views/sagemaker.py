"""SageMaker's API on gpugov's policy, and the page where users make their access keys.

``/aws/sagemaker/`` takes what ``aws sagemaker ... --endpoint-url`` and boto3 send: a POST in
JSON 1.1 (``X-Amz-Target: SageMaker.<Operation>``) signed with SigV4 by one of the user's
access keys. It is not a browser form, so no CSRF token: the signature authenticates each
request. Every answer is AWS's shape, an error ``{"__type": ..., "message": ...}`` with HTTP 400
(docs/interop.md "HyperPod's API"; the operations are ``interop/sagemaker_api.py``).

``/access-keys/`` lists the signed-in user's keys, makes one (its secret shown once) and revokes
one (docs/security.md "Access keys").
"""

from __future__ import annotations

import hmac
import json
import uuid
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from allocations.interop import sagemaker_api, sigv4
from allocations.interop.sagemaker_api import ApiError, Caller
from allocations.models import AccessKey
from allocations.services import access_keys

CONTENT_TYPE = "application/x-amz-json-1.1"
TARGET_PREFIX = "SageMaker."
BAD_SIGNATURE = (
    "The request signature we calculated does not match the signature you provided. Check your AWS "
    "Secret Access Key and signing method. Consult the service documentation for details."
)


def _answer(document: dict[str, Any], status: int = 200) -> HttpResponse:
    response = HttpResponse(json.dumps(document), status=status, content_type=CONTENT_TYPE)
    response["x-amzn-RequestId"] = str(uuid.uuid4())
    return response


def _error(code: str, message: str, status: int = 400) -> HttpResponse:
    """AWS's JSON 1.1 error: botocore reads the code from ``__type`` and the text from ``message``."""
    return _answer({"__type": code, "message": message}, status)


def _authenticate(request: HttpRequest) -> Caller:
    """The caller whose access key signed ``request``; SignatureProblem or ApiError otherwise.

    1. Read the Authorization header's credential scope and signed headers.
    2. Find the access key (an unknown or revoked one is UnrecognizedClientException).
    3. Check the scope's service and region, and the time against the clock (15 minutes).
    4. Recompute the signature with the key's secret and compare in constant time.
    """
    # 1.
    auth = sigv4.parse_authorization(request.headers.get("Authorization", ""))
    # 2.
    key = access_keys.access_key_find(auth.access_key_id)
    if key is None or not key.user.is_active:
        raise ApiError(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    # 3.
    if auth.service != "sagemaker":
        raise sigv4.SignatureProblem(
            "InvalidSignatureException",
            f"Credential should be scoped to correct service: 'sagemaker', not {auth.service!r}.",
        )
    region = settings.GPUGOV_AWS_REGION
    if auth.region != region:
        raise sigv4.SignatureProblem(
            "InvalidSignatureException",
            f"Credential should be scoped to a valid region: {region!r} (GPUGOV_AWS_REGION), not {auth.region!r}.",
        )
    amz_date = request.headers.get("X-Amz-Date", "")
    now = timezone.now()
    sigv4.request_time(amz_date, now)
    if amz_date[:8] != auth.date:
        raise sigv4.SignatureProblem(
            "InvalidSignatureException",
            f"Credential date {auth.date} is not the date of X-Amz-Date {amz_date}.",
        )
    for required in ("host", "x-amz-date"):
        if required not in auth.signed_headers:
            raise sigv4.SignatureProblem("InvalidSignatureException", f"Header {required!r} must be signed.")
    # 4.
    headers = {name.lower(): value for name, value in request.headers.items()}
    # The host the client signed: Host (or X-Forwarded-Host behind a proxy that sets it, with
    # USE_X_FORWARDED_HOST), checked against ALLOWED_HOSTS by get_host.
    headers["host"] = request.get_host()
    canonical = sigv4.canonical_request(
        method=request.method or "POST",
        path=request.path,
        query_string=request.META.get("QUERY_STRING", ""),
        headers=headers,
        signed=auth.signed_headers,
        body=request.body,
    )
    expected = sigv4.expected_signature(
        secret=access_keys.secret_for(key), auth=auth, amz_date=amz_date, canonical=canonical
    )
    if not hmac.compare_digest(expected, auth.signature):
        raise sigv4.SignatureProblem("InvalidSignatureException", BAD_SIGNATURE)
    access_keys.access_key_touch(key=key, now=now)
    return Caller(key.user, key.access_key_id)


@csrf_exempt
def sagemaker_endpoint(request: HttpRequest) -> HttpResponse:
    """One SageMaker operation, as AWS's endpoint answers it."""
    if request.method != "POST":
        return _error("UnknownOperationException", f"{request.method} is not served: POST JSON 1.1.", 405)
    target = request.headers.get("X-Amz-Target", "")
    if not target.startswith(TARGET_PREFIX):
        return _error(
            "UnknownOperationException",
            f"X-Amz-Target {target[:100]!r} is not SageMaker.<Operation>.",
        )
    try:
        caller = _authenticate(request)
        return _answer(sagemaker_api.call(target[len(TARGET_PREFIX) :], request.body, caller))
    except (ApiError, sigv4.SignatureProblem) as exc:
        return _error(exc.code, exc.message)


# --- The access keys page ------------------------------------------------------------------------
@login_required
@require_http_methods(["GET", "POST"])
def access_key_list(request: HttpRequest) -> HttpResponse:
    """The user's keys; POST makes one and shows its secret on this answer only."""
    created = None
    if request.method == "POST":
        try:
            key, secret = access_keys.access_key_create(user=request.user, actor=request.user)
        except ValidationError as exc:
            for message in exc.messages:
                messages.error(request, message)
        else:
            created = {"access_key_id": key.access_key_id, "secret": secret}
    keys = AccessKey.objects.filter(user=request.user)
    return render(
        request,
        "console/access_keys.html",
        {
            "keys": keys,
            "created": created,
            "region": settings.GPUGOV_AWS_REGION,
            "endpoint": request.build_absolute_uri("/aws/sagemaker/"),
        },
    )


@login_required
@require_POST
def access_key_revoke(request: HttpRequest, key_id: str) -> HttpResponse:
    """Revoke one of the user's own keys (another user's answers 404)."""
    key = get_object_or_404(AccessKey, user=request.user, access_key_id=key_id)
    access_keys.access_key_revoke(actor=request.user, key=key)
    messages.success(request, f"Access key {key_id} is revoked.")
    return redirect("allocations:access_keys")


urlpatterns = [
    path("aws/sagemaker/", sagemaker_endpoint, name="sagemaker_api"),
    path("access-keys/", access_key_list, name="access_keys"),
    path("access-keys/<str:key_id>/revoke/", access_key_revoke, name="access_key_revoke"),
]
