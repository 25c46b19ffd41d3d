"""The import page's form: where the document comes from (pasted text or an uploaded file)."""

from __future__ import annotations

from typing import Any

from django import forms

MAX_DOCUMENT_BYTES = 1_000_000  # a policy of hundreds of teams is well under 100 kB


class ImportForm(forms.Form):
    """Pasted JSON or an uploaded file, not both; the file's text becomes ``document``."""

    document = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 14, "class": "mono", "spellcheck": "false"}),
        help_text="A bundle exported by gpugov, or one CreateClusterSchedulerConfig / CreateComputeQuota request.",
        label="JSON",
    )
    file = forms.FileField(required=False, label="or upload a .json file")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        upload = cleaned.get("file")
        text = cleaned.get("document") or ""
        if upload is not None and text.strip():
            raise forms.ValidationError("Paste the JSON or upload a file, not both.")
        if upload is not None:
            if upload.size > MAX_DOCUMENT_BYTES:
                self.add_error(
                    "file", f"{upload.name} is {upload.size} bytes; the limit is {MAX_DOCUMENT_BYTES} bytes."
                )
                return cleaned
            raw = upload.read()
            try:
                cleaned["document"] = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                self.add_error("file", f"{upload.name} is not UTF-8 text (byte {exc.start}).")
        elif not text.strip():
            raise forms.ValidationError("Paste the exported JSON or choose a file to upload.")
        elif len(text.encode()) > MAX_DOCUMENT_BYTES:
            self.add_error("document", f"The text is larger than {MAX_DOCUMENT_BYTES} bytes.")
        return cleaned
