"""The interface of the dev kit's local parts: something started on this machine, stopped by PID.

A service binary (``LocalProcess``), the embedded stack (``EmbeddedStack``) and a
``reelsense serve`` process (``ServiceProcess``) all start and stop the same way, and each is
a context manager that stops what it started, also when the body fails.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class LocalPart(ABC):
    """Started by ``start()`` (which returns the part), stopped by ``stop()`` (safe twice)."""

    @abstractmethod
    def start(self) -> Self:
        """Start the part and return once it answers."""

    @abstractmethod
    def stop(self) -> object:
        """Stop the part and whatever it started; safe to call when it is not running."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
