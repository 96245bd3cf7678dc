"""The API's settings: where it listens, what it serves at most, and the tenants' bearer
tokens, with the checks that refuse weak ones (``InsecureConfig``, which
``ServiceConfig.refuse_left_open`` in ``core.config`` raises too)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings

from core.errors import PermanentError
from core.settings_base import settings_config


class ApiSettings(BaseSettings):
    model_config = settings_config("API_")

    host: str = "127.0.0.1"
    port: int = 8765
    # tenant -> its bearer tokens (several while one is rotated); empty: no auth, which
    # ``reelsense serve`` refuses unless ``allow_anonymous`` says it is meant (local use).
    # Keyed by tenant so that the tokens themselves are only ever SecretStr values.
    tenant_tokens: dict[str, tuple[SecretStr, ...]] = {}
    allow_anonymous: bool = False
    heartbeat_s: float = Field(default=15.0, gt=0)  # comment line on an idle event stream
    health_timeout_s: float = Field(default=2.0, gt=0)  # /healthz waits this long for Redis
    max_page: int = Field(default=500, ge=1)  # largest `limit` a list accepts
    # Event streams one API process keeps open at once, and of them one tenant's (429 beyond).
    max_streams: int = Field(default=1000, ge=1)
    max_streams_per_tenant: int = Field(default=100, ge=1)
    replays_per_minute: int = Field(default=60, ge=1)  # dead-letter replays of one tenant
    replicas: int = Field(default=1, ge=1)  # Ray Serve replicas of the API deployment
    replica_cpus: float = Field(default=0.25, gt=0)
    # Serve the API from the service's own process rather than as Serve replicas behind Serve's
    # proxy; None: when Ray is local (``ray.address`` unset), where it saves two processes.
    in_service_process: bool | None = None

    def weak_tokens(self) -> list[str]:
        """What is wrong with the configured tokens, one line per tenant: a tenant without a
        token would otherwise leave no token at all, and an API without tokens answers anyone;
        a short or placeholder token can be guessed."""
        found = []
        for tenant, secrets in self.tenant_tokens.items():
            tokens = [secret.get_secret_value() for secret in secrets]
            if not tokens:
                found.append(f"api.tenant_tokens: tenant {tenant!r} has no token")
            elif any(len(token.strip()) < MIN_TOKEN_CHARS for token in tokens):
                found.append(
                    f"api.tenant_tokens: a token of tenant {tenant!r} is empty or shorter "
                    f"than {MIN_TOKEN_CHARS} characters"
                )
            elif any(_placeholder(token) for token in tokens):
                found.append(f"api.tenant_tokens: a token of tenant {tenant!r} is a placeholder")
        return found

    def bearer_tokens(self) -> dict[str, str]:
        """bearer token -> tenant, as ``api.app.create_app`` takes it; ``InsecureConfig`` if
        a tenant's tokens are weak (an empty mapping would turn authentication off)."""
        if weak := self.weak_tokens():
            raise InsecureConfig("; ".join(weak))
        mapping: dict[str, str] = {}
        for tenant, secrets in self.tenant_tokens.items():
            for secret in secrets:
                token = secret.get_secret_value()
                if mapping.setdefault(token, tenant) != tenant:
                    raise ValueError("one API token is configured for two tenants")
        return mapping


# A bearer token is a random secret: 32 characters at least (``secrets.token_urlsafe(32)``
# makes 43), never one of the examples' placeholders.
MIN_TOKEN_CHARS = 32
_PLACEHOLDERS = ("change-me", "changeme", "replace-me")


def _placeholder(token: str) -> bool:
    lowered = token.lower()
    return any(marker in lowered for marker in _PLACEHOLDERS)


class InsecureConfig(PermanentError):
    """A setting leaves the service open and no other setting says that is meant."""

    def __init__(self, message: str) -> None:
        super().__init__(f"refusing to start: {message}", code="insecure_config")
