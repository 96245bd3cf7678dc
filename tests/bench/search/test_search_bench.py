"""The search benchmark's corpus and scoring (``bench.search.corpus``), and one quick run of
``python -m bench.search.methods --quick``: its report has every key and sane values, and what each
method can and cannot see shows (frames never hear speech; full text finds an exact code
first). No quality or speed threshold is asserted: the numbers belong in reports.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest

from bench.quality.corpus import FPS, SIZE, write_corpus
from bench.search.corpus import (
    KINDS,
    Answer,
    Query,
    Span,
    corpus,
    edit_truths,
    first_relevant_rank,
    overlaps,
    recall_at,
    reciprocal_rank,
    relevant_spans,
)
from bench.search.phrases import latency_queries, phrase_bank, row_text
from devkit.edited_videos import EditTruth, edit_truth
from devkit.speech_videos import Utterance, espeak_path

needs_espeak = pytest.mark.skipif(
    espeak_path() is None, reason="espeak-ng is not installed (scripts/bootstrap.sh installs it)"
)


def truth_without_voice(name: str, quick: bool = False) -> EditTruth:
    """An edit's truth without writing it: its sentences from their start for a second (the
    voice's real span needs the spoken WAV)."""
    edits, _ = corpus(quick)
    edit = next(e for e in edits if e.name == name)
    truth = edit_truth(Path(f"{name}.mp4"), edit.shots, FPS)
    said = tuple(Utterance(text, start, start + 1.0) for start, text in edit.speech)
    return replace(truth, utterances=said)


def test_a_hit_is_relevant_when_it_overlaps_in_the_same_video() -> None:
    span = Span("shop", 1.0, 4.0)
    assert overlaps(Span("shop", 3.5, 6.0), span)
    assert overlaps(Span("shop", 0.0, 10.0), span)  # a merged hit around it
    assert overlaps(Span("shop", 2.0, 2.0), span)  # a frame: an instant within
    assert overlaps(Span("shop", 4.0, 4.0), span)  # ... at its very end
    assert not overlaps(Span("shop", 4.0, 6.0), span)  # only touching: the next moment
    assert not overlaps(Span("shop", 0.0, 1.0), span)
    assert not overlaps(Span("shop", 4.5, 4.5), span)
    assert not overlaps(Span("gym", 1.0, 4.0), span)


def test_recall_and_reciprocal_rank_of_made_up_hits() -> None:
    spans = [Span("a", 1.0, 3.0), Span("b", 5.0, 8.0)]
    hits = [
        Span("c", 1.0, 3.0),  # wrong video
        Span("a", 3.5, 4.0),  # right video, wrong moment
        Span("b", 7.0, 9.0),  # the second span
        Span("b", 6.0, 6.0),  # the second again, as a frame
        Span("x", 0.0, 1.0),
        Span("a", 2.0, 2.5),  # the first, but sixth
    ]
    assert first_relevant_rank(hits, spans) == 3
    assert reciprocal_rank(hits, spans) == pytest.approx(1 / 3)
    assert recall_at(hits, spans, 5) == 0.5
    assert recall_at(hits, spans, 6) == 1.0
    assert recall_at(hits, spans, 2) == 0.0
    assert first_relevant_rank(hits[:2], spans) is None
    assert reciprocal_rank([], spans) == 0.0
    assert recall_at([], spans, 5) == 0.0
    with pytest.raises(ValueError, match="no recall"):
        recall_at(hits, [], 5)


def test_answers_become_spans_from_the_truth() -> None:
    truths = {name: truth_without_voice(name) for name in ("fire-exit", "gym")}
    exit_query = Query(
        "出口", "zh", (Answer("fire-exit", "安全出口"), Answer("fire-exit", "FIRE EXIT"))
    )
    # One bilingual sign: two captions over the same half second to three seconds.
    assert relevant_spans(exit_query, truths) == (
        Span("fire-exit", 0.5, 3.0),
        Span("fire-exit", 0.5, 3.0),
    )
    said = truths["fire-exit"].utterances[0]
    stairs = Query("stairs", "en", (Answer("fire-exit", said.text),))
    assert relevant_spans(stairs, truths) == (Span("fire-exit", said.start_s, said.end_s),)
    place = Query("gym", "topic", (Answer("gym", None),))
    assert relevant_spans(place, truths) == (Span("gym", 0.0, truths["gym"].duration_s),)
    with pytest.raises(ValueError, match="neither shows nor says"):
        relevant_spans(Query("x", "en", (Answer("gym", "SWIMMING POOL"),)), truths)


@pytest.mark.parametrize("quick", [False, True])
def test_every_query_is_answered_in_its_corpus(quick: bool) -> None:
    edits, queries = corpus(quick)
    truths = {edit.name: truth_without_voice(edit.name, quick) for edit in edits}
    assert len({e.name for e in edits}) == len(edits)
    assert len({q.text for q in queries}) == len(queries)
    for query in queries:
        assert query.kind in KINDS
        assert relevant_spans(query, truths), query.text
    if quick:
        assert (len(edits), len(queries)) == (4, 8)
    else:
        assert len(edits) == 14
        assert len(queries) >= 30
        assert {q.kind for q in queries} == set(KINDS)


def test_no_sentence_is_said_over_a_sign() -> None:
    edits, _ = corpus(quick=False)
    for edit in edits:
        assert 6.0 <= edit_truth("x.mp4", edit.shots, FPS).duration_s <= 10.0, edit.name
        starts = np.cumsum([0.0] + [shot.seconds for shot in edit.shots])
        for at, text in edit.speech:
            shot = int(np.searchsorted(starts, at, side="right")) - 1
            assert not edit.shots[shot].captions(), (edit.name, text)
            assert not any(ch.isdigit() for ch in text), text  # spoken numbers are words


def test_latency_rows_mix_languages_codes_and_numbers() -> None:
    phrases = phrase_bank()
    assert len(phrases) == len(set(phrases)) >= 300
    assert any("发票" in p for p in phrases)
    assert any(p.isascii() for p in phrases)
    rng = np.random.default_rng(1)
    texts = {row_text(phrases[0], rng) for _ in range(20)}
    assert len(texts) > 1  # the codes differ from row to row
    assert all("{" not in text for text in texts)
    queries = latency_queries(np.random.default_rng(7), 50)
    assert len(queries) == 50
    assert any(q.isascii() and " " not in q for q in queries)  # a code
    assert any(not q.isascii() for q in queries)


@pytest.fixture(scope="module")
def quick_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick corpus written once; the run below reuses its videos."""
    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (scripts/bootstrap.sh installs it)")
    workdir = tmp_path_factory.mktemp("search-bench")
    edits, _ = corpus(quick=True)
    write_corpus(edits, workdir / "videos")
    return workdir


@needs_espeak
def test_the_quick_corpus_is_written_and_decodable(quick_workdir: Path) -> None:
    edits, _ = corpus(quick=True)
    truths = edit_truths(edits, write_corpus(edits, quick_workdir / "videos"))
    for name, truth in truths.items():
        with av.open(str(truth.path)) as container:
            video = container.streams.video[0]
            assert (video.width, video.height) == SIZE
            frames = sum(1 for _ in container.decode(video))
            assert abs(frames - round(truth.duration_s * FPS)) <= 1, name
        with av.open(str(truth.path)) as container:
            assert len(container.streams.audio) == 1, name
        # Every sentence is heard within its shot and the video.
        assert truth.utterances, name
        assert all(0 < u.start_s < u.end_s <= truth.duration_s for u in truth.utterances)


@needs_espeak
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_run_reports_every_method(quick_workdir: Path) -> None:
    pytest.importorskip("sinks.search")
    from bench.search.methods import METHODS
    from bench.search.methods import main as search_main

    out = quick_workdir / "search.json"
    assert search_main(["--quick", "--workdir", str(quick_workdir), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for key in ("recall_at_5", "mrr", "latency_ms", "queries", "segments", "per_query"):
        assert key in report, key
    # A long video's parts were found in search soon after their analysis, before it was done.
    assert 0 < report["chunk_to_searchable_p95_s"] < 30
    progressive = report["progressive"]
    assert progressive["parts"] > 0
    assert progressive["captions_found_before_done"] >= 1
    assert progressive["first_caption_found_s"] < progressive["done_s"]
    assert report["queries"] == 8
    assert report["segments"] >= 8  # two signs or a sentence per moment, four edits
    for figures in (report["recall_at_5"], report["mrr"]):
        assert set(figures) == set(METHODS)
        assert all(0.0 <= value <= 1.0 for value in figures.values()), figures
    assert set(report["latency_ms"]) == {"1000", "10000"}
    for methods in report["latency_ms"].values():
        assert set(methods) == {"hybrid", "vector", "text", "embed_query"}
        assert all(0 < m["p50"] <= m["p95"] for m in methods.values()), methods
    queries = {entry["query"]: entry for entry in report["per_query"]}
    assert len(queries) == 8
    for entry in queries.values():
        assert set(entry["methods"]) == set(METHODS)
        assert not any("error" in found for found in entry["methods"].values()), entry
        if entry["kind"] in ("zh-en", "paraphrase"):
            # Answered by speech alone, which frames do not carry.
            assert entry["methods"]["minilm_frames"]["rank"] is None, entry
    for code in ("B7", "80417"):
        assert queries[code]["methods"]["full_text"]["rank"] == 1, queries[code]
