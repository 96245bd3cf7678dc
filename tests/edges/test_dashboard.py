"""The dashboard in headless Chromium, against the API on uvicorn over a real Redis store.

Records are made through the store's own transitions (claim, advance, mark_done,
mark_failed). The page must show the running videos with a bar per stage, follow live
progress from the event stream, list failures with their reasons (as text, never as markup)
and throughput per stage, open a done video's shots, transcript and text, list the review
queue and take a reviewer's verdict, and see only the token's tenant.
With ``REELSENSE_SCREENSHOT=1`` it saves ``docs/dashboard.png``.

Chromium runs with every background-network feature off and an empty profile; the page
loads nothing but its own files from 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import numpy as np
import pytest

from api.app import api_server, create_app
from api.search import SegmentSearch
from checkpoint.base import OutboxEvent, ReviewOutcome
from checkpoint.redis_store import RedisCheckpointStore
from core.config import ReviewSettings
from core.description import ShotDescription
from core.outputs import OutputSegment, VideoOutput
from core.records import ShotBoundary, VideoRef, VideoResult
from core.speech import AudioEvent, Speech, SpeechSegment
from devkit.services import free_port
from models.embedding import E5Embedder
from runtime.messages import review_summary
from sinks.object_store import ResultDocumentSink
from sinks.search import LanceSearchIndex
from stages.review import ReviewStage
from stages.sampling import thumbnail
from storage.local import LocalObjectStore
from tests.sinks import make_result

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
)

PIPELINE = "pv-dash"
TOKEN = "dash-token"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"
T = TypeVar("T")


@dataclass
class Page:
    base: str
    store: RedisCheckpointStore
    epochs: dict[str, int]
    objects: LocalObjectStore


def _outbox(kind: str, ref: VideoRef) -> OutboxEvent:
    return OutboxEvent(
        type=kind,
        video_id=ref.video_id,
        tenant=ref.tenant,
        pipeline_version=PIPELINE,
        timestamp=datetime.now(UTC),
    )


async def _running(
    store: RedisCheckpointStore,
    video_id: str,
    tenant: str,
    stages: dict[str, tuple[int, int | None]],
) -> int:
    ref = VideoRef(video_id, f"file:///videos/{video_id}.mp4", tenant)
    await store.mark_queued(ref, PIPELINE)
    claim = await store.claim(ref, PIPELINE)
    for stage, (done, total) in stages.items():
        await store.advance(video_id, claim.epoch, stage, done, total)
    return claim.epoch


async def _done(
    store: RedisCheckpointStore, video_id: str, tenant: str, frames: int, timings: dict[str, float]
) -> None:
    epoch = await _running(store, video_id, tenant, {"fetch": (1, 1)})
    ref = VideoRef(video_id, "", tenant)
    await store.mark_done(
        video_id, epoch, frames=frames, timings=timings, outbox=_outbox("video.done", ref)
    )


async def _flagged(
    store: RedisCheckpointStore, video_id: str, tenant: str, review: ReviewOutcome
) -> None:
    """Done with the review stage's decision, as the runtime marks it: into the queue."""
    epoch = await _running(store, video_id, tenant, {"fetch": (1, 1)})
    ref = VideoRef(video_id, "", tenant)
    await store.mark_done(
        video_id, epoch, frames=5, timings={}, outbox=_outbox("video.done", ref), review=review
    )


async def _failed(
    store: RedisCheckpointStore, video_id: str, tenant: str, code: str, message: str
) -> None:
    epoch = await _running(store, video_id, tenant, {"fetch": (1, 1)})
    ref = VideoRef(video_id, f"file:///videos/{video_id}.mp4", tenant)
    await store.mark_failed(
        ref,
        epoch,
        code=code,
        message=message,
        pipeline_version=PIPELINE,
        stage="fetch",
        outbox=_outbox("video.failed", ref),
    )


def _result_of_done_1(objects: LocalObjectStore, video_id: str = "done-1") -> VideoResult:
    """done-1's result document and thumbnails (or the same for ``video_id``): two shots, a
    sign, then hostile text; speech said over them until the audio track broke off."""
    texts = ["PLATFORM 9", "PLATFORM 9", "PLATFORM 9", HOSTILE, HOSTILE]
    result = make_result(video_id, frames=5, texts=texts, tenant="acme", version=PIPELINE)
    frames = list(result.frames)
    for index, shade in ((0, 60), (3, 190)):
        image = np.full((90, 160, 3), shade, dtype=np.uint8)
        frames[index] = dataclasses.replace(frames[index], thumbnail=thumbnail(image, 160))
    frames[3] = dataclasses.replace(
        frames[3],
        boundaries=(ShotBoundary(1.5, "cut", 40, 1.5, 1.5),),
        description=ShotDescription(
            caption=HOSTILE[:160],
            tags=["station", "night"],
            objects=["sign"],
            on_screen_text="",
            scene_type="outdoor",
            safety=["weapons"],
        ).model_dump(),
        extras={
            "qr": [{"text": HOSTILE, "format": "QRCode", "box": [[0, 0], [9, 0], [9, 9], [0, 9]]}]
        },
    )
    speech = Speech(
        status="failed",
        segments=(
            SpeechSegment(0.2, 1.4, " Mind the gap.", -0.2, 0.01, language="en"),
            SpeechSegment(1.6, 2.1, HOSTILE, -0.9, 0.2),  # stored before segments had one
        ),
        language="en",
        audio_s=2.2,
        error_code="audio_decode_error",
        error_message="cannot decode the audio track at 2.2 s",
        # A tune over the end, after the last shot (the transcript has the speech).
        events=(AudioEvent("speech", 0.2, 2.1, 0.9), AudioEvent("music", 2.5, 3.5, 0.97)),
    )
    # The first shot's labels (shot_labels); the second has none strong enough.
    labels = [{"name": "streetcar", "score": 0.41, "broader": False}]
    segment = OutputSegment("label", 0.0, 1.5, "streetcar", {"shot": 0, "labels": labels}, True)
    # Two chapters (the second titled with hostile text) and a summary.
    chapters = [
        {"start_s": 0.0, "end_s": 1.5, "title": "PLATFORM 9", "summary": "Mind the gap."},
        {"start_s": 1.5, "end_s": 2.5, "title": HOSTILE, "summary": "A sign."},
    ]
    summary = {"summary": "A station platform.", "tags": ["train", "sign"], "category": "travel"}
    outputs = {
        "shot_labels": VideoOutput({"labels": labels}, (segment,)),
        "chapters": VideoOutput({"chapters": chapters}),
        "summary": VideoOutput(summary),
        # A re-upload of another video's first two seconds, its id hostile text.
        "duplicates": VideoOutput(
            {
                "fingerprint_samples": 3,
                "duplicates": [
                    {
                        "video_id": HOSTILE,
                        "tenant": "acme",
                        "score": 0.9,
                        "mirrored": True,
                        "speed": 1.0,
                        "spans": [
                            {
                                "start_s": 0.0,
                                "end_s": 2.0,
                                "other_start_s": 10.0,
                                "other_end_s": 12.0,
                            }
                        ],
                    }
                ],
            }
        ),
    }
    done = dataclasses.replace(result, frames=frames, speech=speech, outputs=outputs)
    # Reviewed by the real stage: a QR code holding hostile text, and the VLM's safety label.
    review = ReviewStage(ReviewSettings()).analyse(done)
    done = dataclasses.replace(done, outputs={**outputs, "review": review})
    ResultDocumentSink(objects).write([done])
    return done


@pytest.fixture
async def page(redis_url: str, unique: str, tmp_path: Path) -> AsyncIterator[Page]:
    store = RedisCheckpointStore.from_url(redis_url, key_prefix=f"dash-{unique}")
    objects = LocalObjectStore(tmp_path / "objects")
    index = LanceSearchIndex(str(tmp_path / "lance"), E5Embedder())
    index.open()
    index.write([_result_of_done_1(objects)])
    index.refresh()
    epochs = {
        "lecture-42": await _running(
            store,
            "lecture-42",
            "acme",
            {"fetch": (1, 1), "decode": (4, 4), "ocr": (3, 4), "embed": (1, 4)},
        ),
        "keynote-7": await _running(
            store, "keynote-7", "acme", {"fetch": (1, 1), "decode": (2, None), "ocr": (1, None)}
        ),
        "other-tenant": await _running(store, "other-tenant", "globex", {"fetch": (1, 1)}),
    }
    await _done(
        store,
        "done-1",
        "acme",
        20,
        {"fetch": 0.5, "decode": 2.0, "ocr": 4.0, "embed": 1.0, "total": 5.0},
    )
    await _done(
        store,
        "done-2",
        "acme",
        10,
        {"fetch": 0.5, "decode": 0.5, "ocr": 1.0, "embed": 1.0, "total": 2.0},
    )
    await _failed(
        store,
        "corrupt-upload",
        "acme",
        "invalid_video",
        "not a readable video: moov atom not found",
    )
    await _failed(store, "hostile-name", "acme", "fetch_refused", HOSTILE)
    await _failed(store, "globex-failure", "globex", "limit_duration", "too long")

    search = SegmentSearch.over(index)
    app = create_app(store, tokens={TOKEN: "acme"}, heartbeat_s=1.0, results=objects, search=search)
    port = free_port()
    server = api_server(app, "127.0.0.1", port)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.02)
    try:
        yield Page(f"http://127.0.0.1:{port}", store, epochs, objects)
    finally:
        server.should_exit = True
        await serving
        await store.close()
        index.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never look anything up
    profile = tempfile.mkdtemp(prefix="reelsense-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


async def _until(check: Callable[[], T], what: str, timeout_s: float = 20.0) -> T:
    """Polls ``check`` (run in a thread: the browser blocks) until it returns something true."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        try:
            found = await asyncio.to_thread(check)
        except Exception as exc:  # the element may not exist yet, or be redrawn
            last = exc
            found = None
        else:
            last = found
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: last saw {last!r}")


def _bars(driver: Any, video_id: str) -> dict[str, tuple[str, str, str]]:
    from selenium.webdriver.common.by import By

    row = driver.find_element(By.CSS_SELECTOR, f'#inflight tr[data-video-id="{video_id}"]')
    return {
        bar.get_attribute("data-stage"): (
            bar.get_attribute("data-done"),
            bar.get_attribute("data-total"),
            bar.find_element(By.TAG_NAME, "span").value_of_css_property("width"),
        )
        for bar in row.find_elements(By.CSS_SELECTOR, ".bar")
    }


def _texts(driver: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]


async def test_dashboard_shows_progress_failures_and_throughput(page: Page, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    async with httpx.AsyncClient(base_url=page.base) as client:
        root = await client.get("/")
        assert (root.status_code, root.headers["location"]) == (307, "/dashboard")
        html = await client.get("/dashboard")
        assert "default-src 'none'" in html.headers["content-security-policy"]
        assert "http" not in html.text.replace("http-equiv", "")  # nothing from elsewhere

    await asyncio.to_thread(browser.get, f"{page.base}/dashboard#token={TOKEN}")
    await _until(lambda: browser.find_element(By.ID, "stream-state").text == "live", "stream live")

    # Videos in flight, a bar per stage; the other tenant's video is not there.
    rows = await _until(lambda: _texts(browser, "#inflight td.video-id"), "in-flight rows")
    assert sorted(rows) == ["keynote-7", "lecture-42"]
    bars = await asyncio.to_thread(_bars, browser, "lecture-42")
    assert list(bars) == ["fetch", "decode", "ocr", "embed"]
    assert {stage: (done, total) for stage, (done, total, _) in bars.items()} == {
        "fetch": ("1", "1"),
        "decode": ("4", "4"),
        "ocr": ("3", "4"),
        "embed": ("1", "4"),
    }
    widths = {stage: float(width.removesuffix("px")) for stage, (_, _, width) in bars.items()}
    assert widths["decode"] > widths["ocr"] > widths["embed"] > 0
    assert abs(widths["ocr"] / widths["decode"] - 0.75) < 0.02
    counts = await asyncio.to_thread(
        _texts, browser, '#inflight tr[data-video-id="keynote-7"] .stage-count'
    )
    assert counts == ["1/1", "2/?", "1/?"]  # decoding not finished: totals unknown

    # Live: progress from the event stream moves the bars without a reload.
    await page.store.advance("lecture-42", page.epochs["lecture-42"], "embed", 3, 4)
    await _until(
        lambda: _bars(browser, "lecture-42")["embed"][:2] == ("3", "4"), "embed bar at 3/4"
    )
    await page.store.advance("keynote-7", page.epochs["keynote-7"], "vlm", 1, None)
    await _until(lambda: "vlm" in _bars(browser, "keynote-7"), "a new stage's bar")
    # Bars in pipeline order, as the API serves it (/v1/stages): speech last, the image
    # embedder before the text embedder.
    await page.store.advance("lecture-42", page.epochs["lecture-42"], "speech", 2, None)
    await page.store.advance("lecture-42", page.epochs["lecture-42"], "image_embed", 1, 4)
    await _until(
        lambda: (
            list(_bars(browser, "lecture-42"))
            == ["fetch", "decode", "ocr", "image_embed", "embed", "speech"]
        ),
        "bars in pipeline order",
    )

    # A stage with nothing to do for the video (speech without an audio track): "n/a" and a
    # full bar, from the event stream and, after a reload, from the list; never "0/?".
    await page.store.advance(
        "keynote-7", page.epochs["keynote-7"], "speech", 0, 0, applicable=False
    )
    counted = '#inflight tr[data-video-id="keynote-7"] .stage-count'
    for reload in (False, True):
        if reload:
            await asyncio.to_thread(browser.get, f"{page.base}/dashboard#token={TOKEN}")
        await _until(lambda: _texts(browser, counted)[-1:] == ["n/a"], "speech not applicable")
        counts = await asyncio.to_thread(_texts, browser, counted)
        assert counts == ["1/1", "2/?", "1/?", "1/?", "n/a"]  # fetch, decode, ocr, vlm, speech
        bars = await asyncio.to_thread(_bars, browser, "keynote-7")
        assert bars["speech"][2] == bars["fetch"][2]  # as full as a finished stage's
        speech_bar = await asyncio.to_thread(
            browser.find_element,
            By.CSS_SELECTOR,
            '#inflight tr[data-video-id="keynote-7"] .bar[data-stage="speech"]',
        )
        assert speech_bar.get_attribute("data-applicable") == "false"
    await _until(lambda: browser.find_element(By.ID, "stream-state").text == "live", "live again")

    # Failures with their reasons, as text.
    failures = await _until(lambda: _texts(browser, "#failures li"), "failure list")
    assert len(failures) == 2
    joined = "\n".join(failures)
    assert "invalid_video" in joined
    assert "moov atom not found" in joined
    assert HOSTILE in joined  # shown literally, not run
    assert await asyncio.to_thread(lambda: browser.title) == "reelsense · dashboard"
    assert not await asyncio.to_thread(browser.find_elements, By.CSS_SELECTOR, "#failures img")
    assert "globex-failure" not in joined

    # Throughput per stage from the done videos' timings: (20 + 10) frames / stage seconds.
    rates = await _until(
        lambda: {
            row.get_attribute("data-stage"): row.find_element(By.CSS_SELECTOR, ".rate").text
            for row in browser.find_elements(By.CSS_SELECTOR, "#throughput tbody tr")
        },
        "throughput rows",
    )
    assert rates == {"fetch": "30.0", "decode": "12.0", "ocr": "6.0", "embed": "15.0"}

    if os.environ.get("REELSENSE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        await asyncio.to_thread(browser.save_screenshot, str(SCREENSHOT))

    # A video that finishes leaves the in-flight list; one that fails joins the failures.
    ref = VideoRef("keynote-7", "file:///videos/keynote-7.mp4", "acme")
    await page.store.mark_failed(
        ref,
        page.epochs["keynote-7"],
        code="decode_error",
        message="decoding failed",
        pipeline_version=PIPELINE,
        stage="decode",
        outbox=_outbox("video.failed", ref),
    )
    await _until(
        lambda: _texts(browser, "#inflight td.video-id") == ["lecture-42"], "keynote-7 left"
    )
    await _until(
        lambda: any("decode_error" in text for text in _texts(browser, "#failures li")),
        "keynote-7 among the failures",
    )


async def test_dashboard_asks_for_a_token(page: Page, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    await asyncio.to_thread(browser.get, f"{page.base}/dashboard")
    await _until(lambda: browser.find_element(By.ID, "token-form").is_displayed(), "the token form")
    assert await asyncio.to_thread(_texts, browser, "#inflight td.video-id") == []

    def submit() -> None:
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "#token-form button").click()

    await asyncio.to_thread(submit)
    rows = await _until(lambda: _texts(browser, "#inflight td.video-id"), "rows after the token")
    assert sorted(rows) == ["keynote-7", "lecture-42"]


async def test_a_done_videos_result_shows_its_shots_speech_and_text(
    page: Page, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    await asyncio.to_thread(browser.get, f"{page.base}/dashboard#token={TOKEN}")
    done = await _until(lambda: _texts(browser, "#done .video-id"), "done videos")
    assert sorted(done) == ["done-1", "done-2"]

    def open_result(video_id: str) -> None:
        selector = f'#done li[data-video-id="{video_id}"] button'
        browser.find_element(By.CSS_SELECTOR, selector).click()

    await asyncio.to_thread(open_result, "done-1")
    shots = await _until(lambda: _texts(browser, "#shots li"), "the shots")
    assert [text.split("\n") for text in shots] == [
        ["0:00.0–0:01.5 · start", "streetcar 41%"],
        # The VLM's description: its caption (shown literally), scene and tags, safety labels.
        ["0:01.5–0:02.5 · cut", HOSTILE[:160], "outdoor · station · night", "safety: weapons"],
    ]

    def image_widths() -> list[int]:
        images = browser.find_elements(By.CSS_SELECTOR, "#shots img")
        return [int(img.get_property("naturalWidth")) for img in images]

    assert await _until(lambda: image_widths() == [160, 160], "both thumbnails loaded")
    spans = _texts(browser, "#spans .span-text")
    assert spans == ["PLATFORM 9", HOSTILE]  # the hostile text shown literally, not run
    assert not await asyncio.to_thread(browser.find_elements, By.CSS_SELECTOR, "#spans img")
    said = _texts(browser, "#speech tr:has(.speech-text)")
    assert said == ["0:00.2–0:01.4 en Mind the gap.", f"0:01.6–0:02.1 {HOSTILE}"]
    assert not await asyncio.to_thread(browser.find_elements, By.CSS_SELECTOR, "#speech img")
    status = browser.find_element(By.ID, "speech-status").text
    assert "audio_decode_error: cannot decode the audio track at 2.2 s" in status
    assert browser.find_element(By.ID, "audio-events").text == "Audio: music 0:02.5–0:03.5"
    assert await asyncio.to_thread(lambda: browser.title) == "reelsense · dashboard"
    link = browser.find_element(By.ID, "result-vtt").get_attribute("href")
    assert link.endswith("/v1/videos/done-1/result.vtt?track=text")
    speech_link = browser.find_element(By.ID, "result-speech-vtt").get_attribute("href")
    assert speech_link.endswith("/v1/videos/done-1/result.vtt?track=speech")
    chapters_link = browser.find_element(By.ID, "result-chapters-vtt").get_attribute("href")
    assert chapters_link.endswith("/v1/videos/done-1/result.vtt?track=chapters")
    assert _texts(browser, "#chapters li") == [
        "0:00.0–0:01.5 PLATFORM 9 Mind the gap.",
        f"0:01.5–0:02.5 {HOSTILE} A sign.",  # shown literally, not run
    ]
    assert not await asyncio.to_thread(browser.find_elements, By.CSS_SELECTOR, "#chapters img")
    assert browser.find_element(By.ID, "summary-text").text == "A station platform."
    copied = browser.find_element(By.ID, "duplicates").text  # shown literally, not run
    assert copied == f"Re-upload of: {HOSTILE} 0.90 mirrored (0:00.0–0:02.0 = 0:10.0–0:12.0)"
    assert browser.find_element(By.ID, "summary-meta").text == "travel · train · sign"
    assert browser.find_element(By.ID, "review-decision").text == "review"
    categories = browser.find_element(By.ID, "review-categories").text
    assert "qr 0.90 (review)" in categories
    assert "visual 0.80 (review)" in categories
    evidence = [" ".join(text.split("\n")) for text in _texts(browser, "#review-evidence li")]
    assert evidence == [
        f"0:01.5–0:02.0 qr · qr {HOSTILE} in a QR code, 90%",  # shown literally, not run
        "0:01.5–0:02.0 visual · weapons weapons described, 80%",
    ]

    def evidence_frames() -> list[int]:
        images = browser.find_elements(By.CSS_SELECTOR, "#review-evidence img")
        return [int(img.get_property("naturalWidth")) for img in images]

    assert await _until(lambda: evidence_frames() == [160, 160], "the evidence's shot frames")

    # A done video without a stored result: the page says why and keeps working.
    await asyncio.to_thread(open_result, "done-2")
    error = await _until(lambda: browser.find_element(By.ID, "error").text, "an error line")
    assert "result" in error


async def test_the_search_box_finds_places_and_opens_their_video(page: Page, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    await asyncio.to_thread(browser.get, f"{page.base}/dashboard#token={TOKEN}")
    await _until(lambda: _texts(browser, "#done .video-id"), "the page loaded")

    def ask(query: str, kind: str = "") -> None:
        box = browser.find_element(By.ID, "search-query")
        box.clear()
        box.send_keys(query)
        browser.execute_script(f"document.getElementById('search-kind').value = '{kind}'")
        browser.find_element(By.CSS_SELECTOR, "#search-form button").click()

    await asyncio.to_thread(ask, "站台")  # Chinese for "platform"
    hits = await _until(lambda: _texts(browser, "#search-hits li"), "the hits")
    assert hits[0].split("\n") == [
        # The first shot's label (a streetcar, at a platform) is near in meaning too.
        "done-1 0:00.0–0:01.5 · label, speech, text",
        "PLATFORM 9 · streetcar · Mind the gap.",
    ]

    def image_widths() -> list[int]:
        images = browser.find_elements(By.CSS_SELECTOR, "#search-hits img")
        return [int(img.get_property("naturalWidth")) for img in images]

    assert await _until(lambda: image_widths()[:1] == [160], "the shot's thumbnail")

    await asyncio.to_thread(ask, "gap", "speech")
    # Speech alone: the sign is not merged in.
    spoken = await _until(
        lambda: "Mind the gap." in _texts(browser, "#search-hits .hit-text"), "speech alone"
    )
    assert spoken
    # Hostile text is shown as text, never run.
    await asyncio.to_thread(ask, "onerror")
    await _until(lambda: HOSTILE in _texts(browser, "#search-hits .hit-text"), "the hostile hit")
    assert await asyncio.to_thread(lambda: browser.title) == "reelsense · dashboard"

    described = await asyncio.to_thread(ask, "a weapon at a station", "description")
    await _until(
        lambda: _texts(browser, "#search-hits .meta") == ["0:01.5–0:02.5 · description"],
        "the shot's description alone",
    )
    assert described is None

    await asyncio.to_thread(ask, "music", "music")
    await _until(
        lambda: _texts(browser, "#search-hits .meta") == ["0:02.5–0:03.5 · music"], "the tune"
    )

    await asyncio.to_thread(ask, "platform")
    await _until(
        lambda: any(
            text.startswith("PLATFORM 9 · ") and "Mind the gap." in text
            for text in _texts(browser, "#search-hits .hit-text")
        ),
        "the hits",
    )

    def open_first() -> bool:
        browser.find_element(By.CSS_SELECTOR, "#search-hits li button").click()
        return True

    await _until(open_first, "a hit clicked")  # retried while the list is redrawn
    shots = await _until(lambda: _texts(browser, "#shots li"), "the result opened")
    assert len(shots) == 2


def _queue(driver: Any) -> list[tuple[str, str, str]]:
    """The review queue panel, top to bottom: (video id, decision, flagged categories)."""
    from selenium.webdriver.common.by import By

    return [
        (
            item.find_element(By.CSS_SELECTOR, ".video-id").text,
            item.find_element(By.CSS_SELECTOR, ".queue-decision").text,
            item.find_element(By.CSS_SELECTOR, ".queue-categories").text,
        )
        for item in driver.find_elements(By.CSS_SELECTOR, "#queue li")
    ]


async def test_the_review_queue_takes_a_verdict_in_the_result_view(
    page: Page, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    # Oldest first: a blocked video with a hostile id and category, one to review (the
    # result's own review), and another tenant's that must not show.
    blocked = {
        HOSTILE: {"score": 0.9985, "decision": "block", "findings": 1},
        "contact": {"score": 0.0, "decision": "pass", "findings": 0},
    }
    await _flagged(page.store, HOSTILE, "acme", ReviewOutcome("block", blocked))
    _result_of_done_1(page.objects, HOSTILE)
    summary = review_summary(_result_of_done_1(page.objects, "flagged-1"))
    assert summary is not None
    await _flagged(page.store, "flagged-1", "acme", ReviewOutcome(**summary))
    await _flagged(page.store, "globex-flagged", "globex", ReviewOutcome(**summary))

    await asyncio.to_thread(browser.get, f"{page.base}/dashboard#token={TOKEN}")
    await _until(lambda: browser.find_element(By.ID, "stream-state").text == "live", "stream live")
    await _until(lambda: len(_queue(browser)) == 2, "the queue")
    assert _queue(browser) == [
        (HOSTILE, "block", f"{HOSTILE} 1.00"),  # shown literally, not run
        ("flagged-1", "review", "qr 0.90 · visual 0.80"),
    ]
    done = _texts(browser, "#queue .queue-done")
    assert all(text.startswith("done ") and text.endswith(" ago") for text in done)
    assert browser.find_element(By.ID, "queue-note").text == "1 to review · 1 blocked"
    assert not await asyncio.to_thread(browser.find_elements, By.CSS_SELECTOR, "#queue img")
    assert await asyncio.to_thread(lambda: browser.title) == "reelsense · dashboard"

    # A video done while the page is open joins the queue, at its end.
    await _flagged(page.store, "flagged-2", "acme", ReviewOutcome(**summary))
    await _until(
        lambda: [video for video, _, _ in _queue(browser)] == [HOSTILE, "flagged-1", "flagged-2"],
        "the video done since joined",
    )

    def open_queued(at: int) -> bool:
        browser.find_elements(By.CSS_SELECTOR, "#queue li .video-id")[at].click()
        return True

    def verdict_form_shown() -> bool:
        return bool(browser.find_element(By.ID, "verdict-form").is_displayed())

    # Its result with the evidence, and the verdict buttons: approved with a name and a note.
    await _until(lambda: open_queued(1), "flagged-1 opened")  # retried while redrawn
    await _until(lambda: browser.find_element(By.ID, "result-video").text == "flagged-1", "result")
    await _until(verdict_form_shown, "the verdict buttons")
    assert len(_texts(browser, "#review-evidence li")) == 2

    def approve(reviewer: str, note: str) -> None:
        for box, text in (("verdict-reviewer", reviewer), ("verdict-note", note)):
            browser.find_element(By.ID, box).clear()
            browser.find_element(By.ID, box).send_keys(text)
        browser.find_element(By.CSS_SELECTOR, '#verdict-form [data-verdict="approve"]').click()

    await asyncio.to_thread(approve, "ann", "a train timetable")
    await _until(
        lambda: browser.find_element(By.ID, "verdict-given").text.startswith(
            "approve by ann: a train timetable · "
        ),
        "the recorded verdict",
    )
    await _until(
        lambda: [video for video, _, _ in _queue(browser)] == [HOSTILE, "flagged-2"],
        "flagged-1 left the queue",
    )
    assert not await asyncio.to_thread(verdict_form_shown)
    async with httpx.AsyncClient(base_url=page.base) as client:
        auth = {"authorization": f"Bearer {TOKEN}"}
        history = await client.get("/v1/review/flagged-1/history", headers=auth)
        assert [(v["verdict"], v["reviewer"]) for v in history.json()["verdicts"]] == [
            ("approve", "ann")
        ]

        # After a reload the reviewer's name is remembered. A verdict someone else gave
        # meanwhile is a 409 in the error line; the video leaves the queue with that verdict.
        await asyncio.to_thread(browser.get, f"{page.base}/dashboard#token={TOKEN}")
        await _until(lambda: len(_queue(browser)) == 2, "the queue after a reload")
        await _until(lambda: open_queued(0), "the hostile one opened")
        await _until(lambda: browser.find_element(By.ID, "result-video").text == HOSTILE, "it")
        await _until(verdict_form_shown, "its verdict buttons")
        reviewer = browser.find_element(By.ID, "verdict-reviewer").get_attribute("value")
        assert reviewer == "ann"
        answer = await client.post(
            f"/v1/review/{quote(HOSTILE, safe='')}",
            json={"verdict": "remove", "reviewer": "bob"},
            headers=auth,
        )
        assert answer.status_code == 200, answer.text
    remove = '#verdict-form [data-verdict="remove"]'
    await asyncio.to_thread(lambda: browser.find_element(By.CSS_SELECTOR, remove).click())
    error = await _until(lambda: browser.find_element(By.ID, "error").text, "the error line")
    assert "409: verdict_given" in error
    await _until(
        lambda: browser.find_element(By.ID, "verdict-given").text.startswith("remove by bob · "),
        "bob's verdict",
    )
    assert [video for video, _, _ in _queue(browser)] == ["flagged-2"]
    assert await asyncio.to_thread(lambda: browser.title) == "reelsense · dashboard"
