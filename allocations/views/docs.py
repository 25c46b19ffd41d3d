"""The project's documentation in the console: ``/docs/`` lists README.md and docs/*.md,
``/docs/<name>/`` shows one (``allocations/documentation.py`` renders it)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from allocations import documentation


@login_required
@require_GET
def docs_index(request: HttpRequest) -> HttpResponse:
    return render(request, "docs/index.html", {"documents": documentation.documents()})


@login_required
@require_GET
def docs_page(request: HttpRequest, name: str) -> HttpResponse:
    # Only a name of the listed files is served: a path of any other shape is a 404.
    document = documentation.document(name)
    if document is None:
        raise Http404(f"No document {name!r}.")
    return render(
        request,
        "docs/page.html",
        {
            "document": document,
            "body": documentation.render(document.path.read_text(encoding="utf-8")),
            "documents": documentation.documents(),
        },
    )


urlpatterns = [
    path("docs/", docs_index, name="docs_index"),
    path("docs/<slug:name>/", docs_page, name="docs_page"),
]
