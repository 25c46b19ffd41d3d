"""Interoperability pages: export the policy for HyperPod or Kueue, import a HyperPod policy
(preview, then apply), and ``/metrics`` for Prometheus.

Export and import are for cluster administrators. ``/metrics`` is for a Prometheus server: it
takes ``Authorization: Bearer <METRICS_TOKEN>`` instead of a session.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods
from prometheus_client import CONTENT_TYPE_LATEST

from allocations import metrics
from allocations.access import cluster_admin_required
from allocations.interop import hyperpod, kueue
from allocations.interop import policy as interop_policy
from allocations.interop import services as interop_services
from allocations.interop.forms import ImportForm

DOWNLOADS = {
    # ?download=<key>: (filename, content type)
    "hyperpod": ("gpugov-hyperpod.json", "application/json"),
    "kueue-yaml": ("gpugov-kueue.yaml", "application/yaml"),
    "kueue-json": ("gpugov-kueue.json", "application/json"),
}


@cluster_admin_required
@require_GET
def export(request: HttpRequest) -> HttpResponse:
    """The policy as HyperPod requests and Kueue manifests, with what each cannot express."""
    state = interop_policy.read_policy()
    hyperpod_export = hyperpod.export_policy(state)
    kueue_export = kueue.export_manifests(state)
    contents = {
        "hyperpod": hyperpod_export.json,
        "kueue-yaml": kueue_export.yaml,
        "kueue-json": kueue_export.json,
    }
    download = request.GET.get("download")
    if download is not None:
        if download not in DOWNLOADS:
            return HttpResponse(
                f"download: {download!r} is not one of {', '.join(DOWNLOADS)}",
                status=400,
                content_type="text/plain; charset=utf-8",
            )
        filename, content_type = DOWNLOADS[download]
        response = HttpResponse(contents[download](), content_type=f"{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response
    return render(
        request,
        "interop/export.html",
        {
            "hyperpod": hyperpod_export,
            "hyperpod_json": hyperpod_export.json(),
            "kueue": kueue_export,
            "kueue_yaml": kueue_export.yaml(),
            "manifest_count": len(kueue_export.manifests),
        },
    )


@cluster_admin_required
@require_http_methods(["GET", "POST"])
def import_policy(request: HttpRequest) -> HttpResponse:
    """Paste or upload -> preview of the changes -> apply (a second POST with the same text).

    The apply step re-reads the document and recomputes the changes inside its transaction; if
    they differ from the preview (someone changed the policy meanwhile) the new preview is shown
    instead, so nothing is applied that the administrator has not seen.
    """
    if request.method == "GET":
        return render(request, "interop/import.html", {"form": ImportForm()})
    form = ImportForm(request.POST, request.FILES)
    context: dict[str, object] = {"form": form}
    if not form.is_valid():
        return render(request, "interop/import.html", context)
    text = form.cleaned_data["document"]
    try:
        imported = hyperpod.parse(text)
    except hyperpod.ImportRefused as refused:
        context["problems"] = [str(p) for p in refused.problems]
        return render(request, "interop/import.html", context)
    changes = interop_policy.diff(imported)
    digest = interop_policy.changes_digest(changes)
    context.update(
        changes=changes,
        warnings=imported.warnings,
        document=text,
        digest=digest,
        form=ImportForm(initial={"document": text}),
    )
    if request.POST.get("action") != "apply":
        return render(request, "interop/import.html", context)
    if request.POST.get("digest") != digest:
        context["stale"] = True
        return render(request, "interop/import.html", context)
    try:
        applied = interop_services.policy_import_apply(actor=request.user, imported=imported)
    except interop_services.ApplyRefused as refused:
        context["problems"] = refused.messages
        context.pop("changes")
        return render(request, "interop/import.html", context)
    messages.success(request, f"Policy imported: {len(applied)} change(s) applied.")
    return redirect("allocations:import")


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus's scrape target, guarded by a bearer token from the environment."""
    token = settings.METRICS_TOKEN
    if not token:
        return HttpResponse(
            "Metrics are off: set METRICS_TOKEN in the environment and give Prometheus the same "
            "token (Authorization: Bearer <token>).\n",
            status=404,
            content_type="text/plain; charset=utf-8",
        )
    given = request.headers.get("Authorization", "")
    scheme, _, credential = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(credential.strip().encode(), token.encode()):
        response = HttpResponse(
            "Authorization: Bearer <METRICS_TOKEN> is missing or wrong.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="gpugov metrics"'
        return response
    return HttpResponse(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [
    path("console/export/", export, name="export"),
    path("console/import/", import_policy, name="import"),
    path("metrics", metrics_view, name="metrics"),
]
