"""Plotly figures as PNG images, rendered on the server for the report emails.

kaleido 1.x drives a Chromium through the DevTools protocol (choreographer); it is pointed at
``REPORT_CHART_BROWSER`` (Debian's ``/usr/bin/chromium`` by default), loads plotly.js from the
installed plotly package and MathJax not at all, so it needs no network. One browser renders
every figure of a call (starting it costs seconds; each figure then takes a fraction of one).
Images are cached by the figure's JSON, so a preview and the send that follows render once.

``render_pngs`` never raises: when the browser or kaleido is missing or fails, it logs why and
returns None, and the email goes out without images.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)
# kaleido and choreographer log every tab and temporary file at INFO: a worker's log would be
# mostly theirs. Their warnings and errors still get through.
for _noisy in ("kaleido", "choreographer", "logistro"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)

CACHE_PREFIX = "gpugov:report-png:"
CACHE_SECONDS = 24 * 3600
RENDER_TIMEOUT_S = 120


def _key(figure: dict[str, Any]) -> str:
    text = json.dumps(figure, sort_keys=True, default=str)
    return CACHE_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def renderer_unavailable() -> str | None:
    """Why charts cannot be rendered here, or None when they can be tried."""
    browser = settings.REPORT_CHART_BROWSER
    if not browser or browser == "off":
        return "REPORT_CHART_BROWSER is off"
    if not Path(browser).exists():
        return f"REPORT_CHART_BROWSER={browser!r} does not exist"
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "kaleido is not installed"
    return None


async def _render(figures: Sequence[dict[str, Any]], browser: str) -> list[bytes]:
    import kaleido

    images = []
    async with kaleido.Kaleido(n=1, mathjax=False, timeout=60, path=browser) as renderer:
        for figure in figures:
            layout = figure.get("layout", {})
            opts = {"format": "png", "width": layout.get("width", 640), "height": layout.get("height", 300)}
            images.append(await renderer.calc_fig(figure, opts=opts))
    return images


def render_pngs(figures: Sequence[dict[str, Any]]) -> list[bytes] | None:
    """PNG images of ``figures``, in order; None (logged) when they cannot be rendered."""
    why = renderer_unavailable()
    if why:
        log.warning("report charts are not rendered (the email goes without images): %s", why)
        return None
    keys = [_key(figure) for figure in figures]
    cached = cache.get_many(keys)
    missing = [i for i, key in enumerate(keys) if key not in cached]
    if missing:
        try:
            # A thread of its own: asyncio.run refuses to run inside a thread with a running
            # loop (an async server, Playwright's sync API in tests).
            with ThreadPoolExecutor(max_workers=1) as pool:
                images = pool.submit(
                    asyncio.run, _render([figures[i] for i in missing], settings.REPORT_CHART_BROWSER)
                ).result(timeout=RENDER_TIMEOUT_S)
        except Exception:
            log.exception("report charts could not be rendered; the email goes without images")
            return None
        fresh = {keys[i]: image for i, image in zip(missing, images, strict=True)}
        cache.set_many(fresh, timeout=CACHE_SECONDS)
        cached.update(fresh)
    return [cached[key] for key in keys]
