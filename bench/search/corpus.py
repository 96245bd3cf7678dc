"""The search benchmark's corpus: short edits on distinct topics, English and Chinese captions,
English speech, and queries whose answers are known moments of those edits.

Each edit (``bench.quality.corpus.Edit``, written by its ``write_corpus``) is a place: a shop
entrance, a server room, a train platform, a kitchen... Its shots are moments of that place,
each either a sign (a caption from half a second into the shot) or a sentence spoken
(espeak-ng, English only: the speech recogniser is English-only), never both, with half a
second or more between them: a hit on the wrong moment of the right video does not overlap
the right one, and a sentence is not found by the sign shown while it is said.

A query names its answers as an edit and what is written or said there (``Answer``), and they
become spans on the edit's timeline from its truth: the caption's time on screen, the
sentence's voice. A hit is relevant when its video is the answer's and its time overlaps the
span (a frame hit, a single instant, when it lies within it). The kinds of query each test one
thing: the same words in English (``en``) or Chinese (``zh``), an English query answered only
by Chinese text (``en-zh``) or a Chinese one only by English speech or text (``zh-en``), an
English paraphrase sharing no word with its answer (``paraphrase``), an exact code or name
among similar ones (``keyword``), and a place, any moment of its edit (``topic``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from bench.quality.corpus import Edit
from core.records import Frame, OcrLine, ProbeInfo, VideoRef, VideoResult
from devkit.edited_videos import Caption, EditTruth, Shot

KINDS = ("en", "zh", "en-zh", "zh-en", "paraphrase", "keyword", "topic")


@dataclass(frozen=True)
class Answer:
    """Where a query is answered: in edit ``edit``, wherever the caption or sentence
    ``says`` is shown or spoken; anywhere in the edit when ``says`` is None."""

    edit: str
    says: str | None = None


@dataclass(frozen=True)
class Query:
    text: str
    kind: str  # one of KINDS
    answers: tuple[Answer, ...]


@dataclass(frozen=True)
class Span:
    """A stretch of one video: a relevant moment, or what a hit covers."""

    video_id: str
    start_s: float
    end_s: float


Moment = tuple[Shot, tuple[tuple[float, str], ...]]  # a shot, and sentences said in it


def _edit(name: str, about: str, *moments: Moment) -> Edit:
    """An edit of ``moments``, each a shot and the sentences spoken from the given seconds
    into that shot (an edit's speech is timed from its start)."""
    shots, speech, start = [], [], 0.0
    for shot, said in moments:
        shots.append(shot)
        speech += [(round(start + at, 3), text) for at, text in said]
        start += shot.seconds
    return Edit(name, about, tuple(shots), tuple(speech))


def _sign(seed: int, seconds: float, caption: str, top: str = "") -> Moment:
    """A shot showing ``caption`` at the bottom (and ``top`` at the top) from half a second
    into it until it ends; nothing is said."""
    more = (Caption(top, 0.5, where="top"),) if top else ()
    return Shot(seconds, seed=seed, caption=caption, caption_from_s=0.5, more_captions=more), ()


def _said(seed: int, seconds: float, sentence: str, at_s: float, pan: float = 0) -> Moment:
    """A shot without captions, panning by ``pan`` px/s, ``sentence`` said from ``at_s``."""
    return Shot(seconds, seed=seed, pan_px_per_s=pan), ((at_s, sentence),)


# Sentences whose key words the recogniser (Whisper tiny.en) hears in espeak-ng's voice: it
# heard "check the invoice before paying" as "check it in voice", "chop the onions finely" as
# "chop the audience finally", and "board now" as "board out"; these came back word for word,
# or nearly ("we'll" for "will").
BREAD = "The shop sells bread, cakes and coffee every morning."
VISITORS = "Please sign the visitor book at the front desk."
TRAIN = "The next train to the seaside will arrive in five minutes."
BUDGET = "Let us review the budget for next quarter."
ONIONS = "Cut the onions into small pieces and cook them slowly."
INVOICE = "Always read the invoice carefully before you pay."
STAIRS = "In an emergency, walk down the stairs and go outside."
RAIN = "Tomorrow will be cold with heavy rain in the north."
CAR = "Remember where you left your car before going upstairs."
DOCTOR = "The doctor will see you in a few minutes."
FLIGHT = "Your flight to Paris leaves in one hour."
STRETCH = "Stretch your legs slowly before you start running."
PRINTER = "The printer on this floor is out of paper."
BOXES = "Stack the heavy boxes next to the wall."

_EDITS = {
    edit.name: edit
    for edit in (
        _edit(
            "shop-entrance",
            "a shop door: a Chinese welcome sign, then what is sold inside",
            _sign(101, 3.5, "欢迎光临"),
            _said(102, 4.5, BREAD, 0.7, pan=30),
        ),
        _edit(
            "server-room",
            "a data centre's sign in Chinese, a door code, the visitors' book",
            _sign(111, 3.0, "数据中心"),
            _sign(112, 3.0, "DOOR B7"),
            _said(113, 4.0, VISITORS, 0.7),
        ),
        _edit(
            "train-platform",
            "an announcement, a platform sign, a delay notice in Chinese",
            _said(121, 4.0, TRAIN, 0.5, pan=60),
            _sign(122, 3.0, "PLATFORM 4"),
            _sign(123, 3.0, "列车晚点"),
        ),
        _edit(
            "meeting",
            "a meeting's start time in Chinese, a speaker's name, the agenda",
            _sign(131, 3.0, "会议九点开始"),
            _sign(132, 3.0, "MARIA SANTOS"),
            _said(133, 3.5, BUDGET, 0.7),
        ),
        _edit(
            "kitchen",
            "a cooking step, a chef's name, a Chinese warning that it is hot",
            _said(141, 4.0, ONIONS, 0.5),
            _sign(142, 3.0, "CHEF MARIO"),
            _sign(143, 3.0, "小心烫手"),
        ),
        _edit(
            "price-sale",
            "a Chinese special-offer sign, an item number, a word on invoices",
            _sign(151, 3.0, "今日特价"),
            _sign(152, 3.0, "ITEM 80417"),
            _said(153, 3.5, INVOICE, 0.6),
        ),
        _edit(
            "fire-exit",
            "an exit sign in Chinese and English, a no-smoking sign in Chinese, what to do",
            _sign(161, 3.0, "安全出口", top="FIRE EXIT"),
            _sign(162, 3.0, "请勿吸烟"),
            _said(163, 4.0, STAIRS, 0.6),
        ),
        _edit(
            "weather-report",
            "a forecast, then a typhoon warning in Chinese",
            _said(171, 3.5, RAIN, 0.5, pan=20),
            _sign(172, 3.0, "台风警告"),
        ),
        _edit(
            "parking-garage",
            "a reminder, a ticket number, a car park sign in Chinese",
            _said(181, 4.0, CAR, 0.6),
            _sign(182, 3.0, "TICKET 80471"),
            _sign(183, 3.0, "停车场"),
        ),
        _edit(
            "hospital",
            "a pharmacy sign in Chinese, a doctor's name, the wait",
            _sign(191, 3.0, "药房"),
            _sign(192, 3.0, "DR. OKAFOR"),
            _said(193, 3.5, DOCTOR, 0.7),
        ),
        _edit(
            "airport",
            "a flight's departure, a gate sign, baggage claim in Chinese",
            _said(201, 3.5, FLIGHT, 0.5),
            _sign(202, 3.0, "GATE C14"),
            _sign(203, 3.0, "行李提取"),
        ),
        _edit(
            "gym",
            "a gym sign in Chinese, then advice before running",
            _sign(211, 3.5, "健身房"),
            _said(212, 3.5, STRETCH, 0.7, pan=40),
        ),
        # Look-alikes of the codes above: a door, a gate, an item, a ticket, each a character
        # or two away from another edit's.
        _edit(
            "office",
            "an office: a door code and an item number like the server room's and the sale's",
            _sign(221, 2.5, "DOOR B9"),
            _sign(222, 2.5, "ITEM 80714"),
            _said(224, 3.5, PRINTER, 0.6),
        ),
        _edit(
            "warehouse",
            "a warehouse: a gate and a ticket number like the airport's and the car park's",
            _sign(231, 2.5, "GATE C41"),
            _sign(232, 2.5, "TICKET 84017"),
            _said(234, 3.5, BOXES, 0.6),
        ),
    )
}


def _q(text: str, kind: str, *answers: tuple[str, str | None]) -> Query:
    return Query(text, kind, tuple(Answer(edit, says) for edit, says in answers))


_QUERIES = (
    # English queries answered only by Chinese captions.
    _q("welcome", "en-zh", ("shop-entrance", "欢迎光临")),
    _q("data center", "en-zh", ("server-room", "数据中心")),
    _q("the train is delayed", "en-zh", ("train-platform", "列车晚点")),
    _q("what time does the meeting start", "en-zh", ("meeting", "会议九点开始")),
    _q("careful, hot", "en-zh", ("kitchen", "小心烫手")),
    _q("today's special offer", "en-zh", ("price-sale", "今日特价")),
    _q("no smoking", "en-zh", ("fire-exit", "请勿吸烟")),
    _q("typhoon alert", "en-zh", ("weather-report", "台风警告")),
    _q("pharmacy", "en-zh", ("hospital", "药房")),
    _q("baggage claim", "en-zh", ("airport", "行李提取")),
    # Chinese queries answered by Chinese captions (an exit also by the English sign).
    _q("欢迎", "zh", ("shop-entrance", "欢迎光临")),
    _q("会议", "zh", ("meeting", "会议九点开始")),
    _q("特价", "zh", ("price-sale", "今日特价")),
    _q("吸烟", "zh", ("fire-exit", "请勿吸烟")),
    _q("出口", "zh", ("fire-exit", "安全出口"), ("fire-exit", "FIRE EXIT")),
    _q("停车场", "zh", ("parking-garage", "停车场")),
    # Chinese queries answered by English speech (or a name shown while it is said).
    _q("发票", "zh-en", ("price-sale", INVOICE)),
    _q("洋葱", "zh-en", ("kitchen", ONIONS)),
    _q("医生", "zh-en", ("hospital", DOCTOR), ("hospital", "DR. OKAFOR")),
    _q("明天下雨", "zh-en", ("weather-report", RAIN)),
    _q("航班", "zh-en", ("airport", FLIGHT)),
    _q("预算", "zh-en", ("meeting", BUDGET)),
    # The same words in English.
    _q("next train to the seaside", "en", ("train-platform", TRAIN)),
    _q("heavy rain tomorrow", "en", ("weather-report", RAIN)),
    _q("visitor book", "en", ("server-room", VISITORS)),
    _q("fire exit", "en", ("fire-exit", "FIRE EXIT"), ("fire-exit", "安全出口")),
    # Paraphrases that share no word with their answer.
    _q("verify the bill prior to settling up", "paraphrase", ("price-sale", INVOICE)),
    _q("loosen up muscles prior to a jog", "paraphrase", ("gym", STRETCH)),
    _q("a physician is coming shortly", "paraphrase", ("hospital", DOCTOR)),
    _q("dice and saute vegetables", "paraphrase", ("kitchen", ONIONS)),
    _q("where to get loaves and espresso", "paraphrase", ("shop-entrance", BREAD)),
    _q("evacuate via staircase during a crisis", "paraphrase", ("fire-exit", STAIRS)),
    # Codes, numbers and names among similar ones (B7, C14; 80417, 80471; Maria, Mario).
    _q("B7", "keyword", ("server-room", "DOOR B7")),
    _q("80417", "keyword", ("price-sale", "ITEM 80417")),
    _q("C14", "keyword", ("airport", "GATE C14")),
    _q("80471", "keyword", ("parking-garage", "TICKET 80471")),
    _q("Maria Santos", "keyword", ("meeting", "MARIA SANTOS")),
    _q("Okafor", "keyword", ("hospital", "DR. OKAFOR")),
    _q("B9", "keyword", ("office", "DOOR B9")),
    _q("80714", "keyword", ("office", "ITEM 80714")),
    _q("C41", "keyword", ("warehouse", "GATE C41")),
    _q("84017", "keyword", ("warehouse", "TICKET 84017")),
    _q("printer out of paper", "en", ("office", PRINTER)),
    _q("堆放箱子", "zh-en", ("warehouse", BOXES)),
    # Places: any moment of the edit.
    _q("gym", "topic", ("gym", None)),
    _q("car park", "topic", ("parking-garage", None)),
)

_QUICK_EDITS = ("shop-entrance", "server-room", "price-sale", "fire-exit")
_QUICK_QUERIES = (
    "welcome",
    "no smoking",
    "吸烟",
    "发票",
    "verify the bill prior to settling up",
    "evacuate via staircase during a crisis",
    "B7",
    "80417",
)


def corpus(quick: bool) -> tuple[tuple[Edit, ...], tuple[Query, ...]]:
    """The edits and queries: four edits and eight queries of ``--quick``, or all of them."""
    if not quick:
        return tuple(_EDITS.values()), _QUERIES
    queries = {query.text: query for query in _QUERIES}
    return tuple(_EDITS[name] for name in _QUICK_EDITS), tuple(
        queries[text] for text in _QUICK_QUERIES
    )


def relevant_spans(query: Query, truths: Mapping[str, EditTruth]) -> tuple[Span, ...]:
    """Where the query's answers are, from the truth of each edit (by edit name, which is also
    the video id); every time a caption is shown or a sentence said counts."""
    spans: list[Span] = []
    for answer in query.answers:
        truth = truths[answer.edit]
        if answer.says is None:
            spans.append(Span(answer.edit, 0.0, truth.duration_s))
            continue
        found = [(start, end) for text, start, end in truth.captions if text == answer.says]
        found += [(u.start_s, u.end_s) for u in truth.utterances if u.text == answer.says]
        if not found:
            where = f"{query.text!r}: {answer.edit}"
            raise ValueError(f"{where} neither shows nor says {answer.says!r}")
        spans += [Span(answer.edit, start, end) for start, end in found]
    return tuple(spans)


def overlaps(hit: Span, span: Span) -> bool:
    """Whether a hit covers part of a relevant span: same video, and a stretch of time in
    common (an instant, a frame's time, when it lies within the span)."""
    if hit.video_id != span.video_id:
        return False
    common = min(hit.end_s, span.end_s) - max(hit.start_s, span.start_s)
    return common > 0 or (hit.start_s == hit.end_s and common == 0)


def first_relevant_rank(hits: Sequence[Span], spans: Sequence[Span]) -> int | None:
    """The rank (from 1) of the first hit that overlaps a relevant span; None: no hit does."""
    for rank, hit in enumerate(hits, start=1):
        if any(overlaps(hit, span) for span in spans):
            return rank
    return None


def recall_at(hits: Sequence[Span], spans: Sequence[Span], k: int) -> float:
    """The share of relevant spans that some hit among the first ``k`` overlaps."""
    if not spans:
        raise ValueError("a query without relevant spans has no recall")
    top = hits[:k]
    return sum(any(overlaps(hit, span) for hit in top) for span in spans) / len(spans)


def reciprocal_rank(hits: Sequence[Span], spans: Sequence[Span]) -> float:
    rank = first_relevant_rank(hits, spans)
    return 0.0 if rank is None else 1.0 / rank


def edit_truths(edits: Sequence[Edit], truths: Sequence[EditTruth]) -> dict[str, EditTruth]:
    """The truths by edit name (``write_corpus`` returns them in the order of the edits)."""
    return {edit.name: truth for edit, truth in zip(edits, truths, strict=True)}


# The latency tables' texts: the kinds of line shown and said in the corpus, in English and
# Chinese, with words filled in once per phrase ({city}, {item}, {name}) and codes and numbers
# drawn anew for every row ({code}, {num}, {hour}, {small}).
HAYSTACK_FRAMES = 20  # texts per haystack video, one a sample, 2 s apart


def haystack(count: int, seed: int = 11) -> list[VideoResult]:
    """``count`` segments of other videos for the labelled ones to be found among: signs of
    the same forms as the corpus's codes (doors, gates, items, tickets, rooms) with other
    codes, as a catalogue's worth of videos would show. They answer no query; a search that
    takes "B7" for "B71" or "80417" for "80471" finds them first."""
    rng = np.random.default_rng(seed)
    taken = {"B7", "B9", "C14", "C41", "80417", "80471", "80714", "84017"}
    texts: list[str] = []
    while len(texts) < count:
        letter = "ABCDEFGH"[int(rng.integers(8))]
        forms = (
            ("DOOR", f"{letter}{int(rng.integers(1, 100))}"),
            ("GATE", f"{letter}{int(rng.integers(1, 100))}"),
            ("ITEM", f"{int(rng.integers(10_000, 100_000))}"),
            ("TICKET", f"{int(rng.integers(10_000, 100_000))}"),
            ("ROOM", f"{int(rng.integers(100, 1000))}{letter}"),
        )
        word, code = forms[int(rng.integers(len(forms)))]
        if code not in taken:
            texts.append(f"{word} {code}")
    box = ((0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0))
    probe = ProbeInfo("mov,mp4", "h264", 640, 360, 25.0, 2.0 * HAYSTACK_FRAMES, 1, 0, 0)
    results = []
    for n, start in enumerate(range(0, count, HAYSTACK_FRAMES)):
        frames = [
            Frame(i, 2.0 * i, None, ocr_lines=[OcrLine(text, 0.9, box)])
            for i, text in enumerate(texts[start : start + HAYSTACK_FRAMES])
        ]
        ref = VideoRef(f"haystack-{n:04d}", f"file:///haystack/{n}.mp4")
        results.append(VideoResult(ref, "haystack", probe, frames, datetime.now(UTC)))
    return results
