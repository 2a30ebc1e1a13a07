"""``/ui``: the read-only inspector page (static HTML, CSS and JS shipped in the package).

The page holds no data and no secret: the user types an API key, kept in the tab's
``sessionStorage`` and sent as a bearer header to the JSON API. It only reads: ``GET`` routes
and ``POST /search`` with ``touch: false``. Graphs are drawn with Cytoscape.js, vendored in
``static/vendor/cytoscape`` (MIT, licence beside it). A strict Content-Security-Policy allows
scripts, styles and requests from this origin only.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

router = APIRouter(include_in_schema=False)


@router.get("/ui")
def inspector() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=SECURITY_HEADERS)


def mount_static(app: FastAPI) -> None:
    """Serve ``static/`` under ``/ui/static``."""
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
