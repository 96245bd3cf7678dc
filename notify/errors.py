"""Errors of the notifier. Reason codes appear in the delivery log and dead letters."""

from __future__ import annotations

from core.errors import PermanentError, RetryableError


class InvalidSecret(PermanentError):
    """A webhook secret is not ``whsec_`` followed by base64."""

    code = "invalid_webhook_secret"


class SignatureInvalid(PermanentError):
    """A message's signature, headers or timestamp did not verify."""

    code = "webhook_signature_invalid"


class TargetRefused(PermanentError):
    """The URL may not be called: scheme, or an address that is not globally routable."""

    code = "webhook_target_refused"


class TargetUnresolvable(RetryableError):
    """The host name did not resolve; DNS may come back."""

    code = "webhook_target_unresolvable"


class DeliveryFailed(RetryableError):
    """The endpoint could not be reached, timed out or answered with an error worth retrying."""

    code = "webhook_delivery_failed"


class DeliveryRejected(PermanentError):
    """The endpoint refused this message (a 4xx other than 408, 425, 429)."""

    code = "webhook_rejected"


class EndpointDisabled(PermanentError):
    """The endpoint said it is gone (410) or failed for too long; nothing more is sent to it."""

    code = "webhook_endpoint_disabled"


class StatusPublishFailed(RetryableError):
    """The status topic could not take the event right now."""

    code = "status_publish_failed"


class StatusPublishRefused(PermanentError):
    """The broker will never take this event (too large, topic refused): dead-lettered."""

    code = "status_publish_refused"


class DeliveryLogUnavailable(RetryableError):
    """The delivery log's store could not be reached."""

    code = "delivery_log_unavailable"
