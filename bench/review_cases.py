"""The review benchmark's cases: short videos whose contact details, QR codes and listed terms
are known, and the term lists they are checked against.

Each case is one or two scenes of ``devkit.samples`` (640 x 360, 10 fps): lines on screen,
perhaps a QR code at the right, perhaps an English sentence said by espeak-ng (``en-us``; no
Chinese voice: what is said is English). ``flags`` are the categories the review stage must
flag; ``place`` is where a case's contact detail is (``screen``, ``speech``, ``qr``).

The spoken contact details are phrased as an advertiser says them and as Whisper base writes
them back (phrasings tried on their own first; ``docs/benchmarks/quality.md`` lists what it
heard): digits said in groups come back as digits ("Call 138-1234-5678"), "happy shop dot
com" as "HappyShop.com". A name it mishears still makes a link ("example dot com" comes back
as another name ending in ".com"): the category is flagged, and the case's details show the
value heard. A WeChat id said ("my id is shop eight eight eight eight") came back as noise,
so none is said here.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from devkit.samples import Scene, write_video
from devkit.speech_videos import speak_over

SIZE = (640, 360)
FPS = 10
VOICE = "en-us"
SPEECH_LEAD_S = 0.3  # a scene's sentence starts this long after its cut
Place = Literal["screen", "speech", "qr"]  # where a contact detail is
PLACES: tuple[Place, ...] = ("screen", "speech", "qr")

#: The operator's term lists, as files ``<list>.txt`` in the terms folder.
TERM_LISTS: dict[str, tuple[str, ...]] = {
    "gambling": ("赌博", "博彩", "casino"),
    "drugs": ("冰毒", "大麻", "cocaine"),
}

WHITE, CREAM, NAVY = (250, 250, 245), (245, 235, 200), (20, 30, 90)


@dataclass(frozen=True)
class Case:
    """One video: its scenes, the categories it must be flagged in, and where its contact
    detail is (None: it holds none)."""

    name: str
    scenes: tuple[Scene, ...]
    flags: frozenset[str] = frozenset()
    place: Place | None = None

    @property
    def said(self) -> tuple[str, ...]:
        return tuple(scene.said for scene in self.scenes if scene.said)

    def script(self) -> list[tuple[float, str]]:
        """When each scene's sentence is said: ``(start_s, sentence)``."""
        script: list[tuple[float, str]] = []
        start = 0.0
        for scene in self.scenes:
            if scene.said:
                script.append((start + SPEECH_LEAD_S, scene.said))
            start += scene.seconds
        return script


def shown(name: str, *lines: str, flags: str = "", place: Place | None = None) -> Case:
    """A 4 s video showing ``lines``."""
    return Case(name, (Scene(lines, 4.0, WHITE),), frozenset(flags.split()), place)


def said(
    name: str, sentence: str, *lines: str, flags: str = "", place: Place | None = None
) -> Case:
    """A 6 s video showing ``lines`` (clean text) while ``sentence`` is said."""
    return Case(name, (Scene(lines, 6.0, CREAM, said=sentence),), frozenset(flags.split()), place)


def coded(name: str, text: str, *lines: str, flags: str = "qr", place: Place | None = None) -> Case:
    """A 4 s video showing a QR code of ``text`` beside ``lines``."""
    return Case(name, (Scene(lines, 4.0, WHITE, qr=text),), frozenset(flags.split()), place)


CONTACT_ON_SCREEN = (
    shown("mobile-spaced", "限时优惠", "咨询热线 138 1234 5678", flags="contact", place="screen"),
    shown("mobile-plain", "新品上市", "13812345678", flags="contact", place="screen"),
    shown("mobile-plus86", "+86 138-1234-5678", "欢迎咨询", flags="contact", place="screen"),
    shown("mobile-fullwidth", "手机 １３８１２３４５６７８", flags="contact", place="screen"),
    shown(
        "mobile-fullwidth-bare",
        "今日特惠",
        "１３９ ８７６５ ４３２１",
        flags="contact",
        place="screen",
    ),
    shown("landline", "北京总店", "010-8888 6666", flags="contact", place="screen"),
    shown("international", "London store", "+44 20 7946 0958", flags="contact", place="screen"),
    shown("wechat", "微信: shop_8888", "扫码进群", flags="contact", place="screen"),
    shown("vx", "VX: abc12345", "私聊领取优惠券", flags="contact", place="screen"),
    shown("qq", "QQ 12345678", "加群领福利", flags="contact", place="screen"),
    shown("url", "https://example.com/join", "点击链接报名", flags="contact", place="screen"),
    shown("domain", "shop.example.cn", "官方旗舰店", flags="contact", place="screen"),
    shown("email", "联系邮箱 sales@example.com", flags="contact", place="screen"),
    Case(
        "after-clean-scene",
        (
            Scene(("Welcome to our shop", "欢迎光临"), 3.0, NAVY),
            Scene(("加微信 sunny_2024", "领取新人礼包"), 3.0, CREAM),
        ),
        frozenset({"contact"}),
        "screen",
    ),
)

CONTACT_IN_SPEECH = (
    said(
        "said-mobile",
        "Call one three eight, one two three four, five six seven eight.",
        "新品上市",
        flags="contact",
        place="speech",
    ),
    said(
        "said-mobile-orders",
        "For orders, call one five eight, zero zero one one, two two three three.",
        "Spring sale",
        flags="contact",
        place="speech",
    ),
    said(
        "said-site",
        "Order now at happy shop dot com.",
        "限时抢购",
        flags="contact",
        place="speech",
    ),
    said(
        "said-www",
        "For more, go to www dot sunny shop dot com.",
        "New arrivals",
        flags="contact",
        place="speech",
    ),
    said(
        "said-example",
        "Visit example dot com to buy.",
        "今日特价",
        flags="contact",
        place="speech",
    ),
    said(
        "said-email",
        "Email us at hello at sunny shop dot com.",
        "Customer service",
        flags="contact",
        place="speech",
    ),
)

QR_CODES = (
    coded("qr-url", "https://example.com/join", "扫码关注", flags="qr contact", place="qr"),
    coded("qr-short-link", "https://t.cn/A6abcdEf", "扫码进群", flags="qr contact", place="qr"),
    coded(
        "qr-wechat-link",
        "http://weixin.qq.com/r/abc123DEF",
        "扫一扫",
        flags="qr contact",
        place="qr",
    ),
    coded("qr-text", "欢迎光临本店", "扫一扫"),
    coded("qr-serial", "ORDER-20240501", "今日特价"),
    coded("qr-beside-clean", "SN2024050100017", "价格 ¥1380", "包邮到家"),
)

TERMS = (
    shown("term-simplified", "赌博", "网上娱乐", flags="terms"),
    shown("term-traditional", "賭博網站", "注册就送", flags="terms"),
    shown("term-spaced", "赌 博", "天天有奖", flags="terms"),
    shown("term-second-word", "博彩平台", "注册送彩金", flags="terms"),
    shown("term-drugs", "出售冰毒", "同城配送", flags="terms"),
    said("term-said", "Come and play at the best casino in town.", "Grand opening", flags="terms"),
    shown(
        "term-and-contact", "大麻 批发", "微信: weed_8888", flags="terms contact", place="screen"
    ),
)

CLEAN = (
    shown("price-yen", "价格 ¥1380", "限时抢购"),
    shown("price-yuan", "价格 2999 元", "包邮到家"),
    shown("dates", "2024-05-01", "2024年5月1日"),
    shown("order-number", "订单号 20240501123456", "已发货"),
    shown("year-time", "Since 1998", "营业时间 14:30"),
    shown("version-file", "v2.3.1", "report.pdf"),
    shown("chinese", "今天天气很好", "我们一起去公园"),
    shown("english", "Thank you for watching", "See you next time"),
    said(
        "said-clean",
        "Welcome to our shop, everything is on sale today.",
        "Welcome to our shop",
        "Everything is on sale today",
    ),
    said("said-date", "The sale starts on May first at ten in the morning.", "SALE", "新品发布会"),
)

ALL: tuple[Case, ...] = (*CONTACT_ON_SCREEN, *CONTACT_IN_SPEECH, *QR_CODES, *TERMS, *CLEAN)
QUICK_NAMES = (
    "mobile-spaced",
    "wechat",
    "said-mobile",
    "qr-url",
    "qr-text",
    "term-traditional",
    "price-yen",
    "said-clean",
)


def cases(quick: bool) -> tuple[Case, ...]:
    """Every case, or the quick set: contact on screen, in speech and in a QR code, a QR code
    of plain text, a term, a clean scene and clean speech."""
    return tuple(c for c in ALL if c.name in QUICK_NAMES) if quick else ALL


def write_terms(folder: Path) -> Path:
    """The term lists (``TERM_LISTS``) as ``<list>.txt`` files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, terms in TERM_LISTS.items():
        (folder / f"{name}.txt").write_text("\n".join(terms) + "\n", encoding="utf-8")
    return folder


def write_cases(items: Sequence[Case], folder: Path) -> list[Path]:
    """Each case's video in ``folder``, named by its contents: a video already there (a kept
    ``--workdir``) is used again."""
    folder.mkdir(parents=True, exist_ok=True)
    return [_written(case, folder) for case in items]


def _written(case: Case, folder: Path) -> Path:
    digest = hashlib.sha256(repr((case.scenes, SIZE, FPS, VOICE)).encode()).hexdigest()[:10]
    path = folder / f"{case.name}-{digest}.mp4"
    if path.is_file():
        return path
    with tempfile.TemporaryDirectory(prefix=f"reelsense-{case.name}-", dir=folder) as scratch:
        silent = write_video(Path(scratch) / path.name, case.scenes, fps=FPS, size=SIZE)
        made = Path(scratch) / f"voiced-{path.name}"
        if case.said:
            speak_over(silent, case.script(), made, Path(scratch), voice=VOICE)
        else:
            made = silent
        made.replace(path)
    return path
