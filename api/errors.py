"""Errors of the progress API, and the handlers that answer every error with one shape:
``{"error": {"code", "message"}}``."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.models import ErrorBody, ErrorDetail
from core.errors import PermanentError, RetryableError


class ApiError(Exception):
    """An answer other than success, rendered as ``{"error": {"code", "message"}}``."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as ``{"error": {"code", "message"}}``."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(RetryableError, _retryable)
    app.add_exception_handler(PermanentError, _permanent)


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    return error_response(exc.status, exc.code, exc.message, {**headers, **exc.headers})


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), exc.headers)


async def _invalid_request(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
    )
    return error_response(422, "invalid_request", problems)


async def _retryable(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RetryableError)
    after = exc.retry_after
    headers = {"Retry-After": str(max(1, round(after)))} if after is not None else None
    return error_response(503, exc.code, exc.message, headers)


async def _permanent(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PermanentError)
    return error_response(400, exc.code, exc.message)
