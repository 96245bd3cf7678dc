"""An endpoint that takes connections and never answers (a hung server, a firewall that drops
the replies): it counts the connections it holds at once. For the webhook tests and the soak."""

from __future__ import annotations

import asyncio


class Blackhole:
    """Listens on 127.0.0.1; ``url()`` is an http URL on it."""

    def __init__(self) -> None:
        self.open = 0  # connections held now
        self.most_open = 0
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> Blackhole:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        return self

    def url(self, path: str = "/hook") -> str:
        assert self._server is not None, "start it first"
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}{path}"

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.accepted += 1
        self.most_open = max(self.most_open, self.open)
        self._writers.append(writer)
        try:
            await reader.read()  # until the client gives up and closes
        finally:
            self.open -= 1
            writer.close()

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()
        self._server = None
