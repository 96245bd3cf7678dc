"""The dashboard page: videos in flight, done videos and their results, recent failures and
throughput per stage.

A static page (``api/static``) that reads the progress API from the browser: the lists
for the first picture, the event stream for live progress. Everything it needs is served
from here, so it works without any network beyond the API itself.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import FastAPI, HTTPException
from fastapi.responses import RedirectResponse, Response

DASHBOARD_PATH = "/dashboard"
_ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
# The page loads only its own script and style and talks only to this origin.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def _asset(name: str) -> bytes:
    return resources.files("api").joinpath("static", name).read_bytes()


def install_dashboard(app: FastAPI) -> None:
    """Serve the page at ``/dashboard`` (and send ``/`` there). Not part of the API schema."""

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse(DASHBOARD_PATH, status_code=307)

    @app.get(DASHBOARD_PATH, include_in_schema=False)
    async def dashboard() -> Response:
        return Response(
            _asset("dashboard.html"),
            media_type="text/html; charset=utf-8",
            headers=_SECURITY_HEADERS,
        )

    @app.get(DASHBOARD_PATH + "/{name}", include_in_schema=False)
    async def dashboard_asset(name: str) -> Response:
        media_type = _ASSETS.get(name)
        if media_type is None:
            raise HTTPException(404, f"no dashboard file {name!r}")
        return Response(_asset(name), media_type=media_type, headers=_SECURITY_HEADERS)
