"""``GET /v1/stages``: the pipeline order the dashboard lays its bars and rows out in, from
``core.stage_names`` (the dashboard keeps no list of its own)."""

from __future__ import annotations

import httpx

from api.app import create_app
from checkpoint.redis_store import RedisCheckpointStore
from core.stage_names import ALL


async def test_the_stages_are_served_in_pipeline_order() -> None:
    store = RedisCheckpointStore.from_url("redis://127.0.0.1:1/0")  # never reached
    app = create_app(store, tokens={"token-a": "acme"})
    try:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            anonymous = await client.get("/v1/stages")
            answer = await client.get("/v1/stages", headers={"authorization": "Bearer token-a"})
    finally:
        await store.close()
    assert anonymous.status_code == 401  # a /v1 route, like the others
    assert answer.status_code == 200
    assert answer.json() == {"stages": list(ALL)}
    assert answer.json()["stages"].index("image_embed") < answer.json()["stages"].index("embed")
