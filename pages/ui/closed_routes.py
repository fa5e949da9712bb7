"""Routes of Streamlit's server that Attention Studio keeps closed unless the operator opens
them: ``/_stcore/metrics`` answers anyone who reaches the port with the server's cache names
and sizes, sessions and timings, so it is off (404) unless ``ATTENTION_STUDIO_METRICS=1``.

``ClosedRoutes`` is an ASGI middleware that app.py's ``st.App`` puts in front of Streamlit's
own routes, whatever server runs the app (``streamlit run``, uvicorn).
"""

from __future__ import annotations

import os

METRICS_ENV = "ATTENTION_STUDIO_METRICS"  # "1": serve /_stcore/metrics (for a scraper)
METRICS_PATH = "/_stcore/metrics"


def metrics_open() -> bool:
    """Whether the operator opened the metrics route (ATTENTION_STUDIO_METRICS=1)."""
    return os.environ.get(METRICS_ENV, "").strip() == "1"


def closed(path: str) -> bool:
    """Whether a request for ``path`` (with any base URL before it) is not served."""
    clean = "/" + "/".join(part for part in path.split("/") if part)
    return not metrics_open() and (clean == METRICS_PATH or clean.endswith(METRICS_PATH))


class ClosedRoutes:
    """An ASGI middleware answering 404 to the closed routes (see the module)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") == "http" and closed(str(scope.get("path", ""))):
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)
