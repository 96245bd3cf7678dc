"""Contact details in text that draw users off the platform: phone numbers, WeChat, QQ and
Telegram ids, URLs, domains and email addresses, as people write them to slip past filters.

The text is read through a view that undoes what hides a number or a link from a regular
expression but not from a reader: full-width forms (NFKC), zero-width characters, and digits
spoken as words (``一三八…``, ``幺``, ``one three eight…``, as speech recognition writes them).
Every hit keeps its offsets in the text as given. Confidence says how sure the rule is that the
text is what its kind says: a bare number that could as well be a price, a date or an order
number stays below 0.5 (``find_contacts`` reports it so that thresholds decide).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain

#: The CJK scripts (kana, Han, Hangul) as the body of a regular expression character class.
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff"


@dataclass(frozen=True)
class TextHit:
    """One finding in a text, with ``[start, end)`` offsets into the text as given."""

    kind: str  # "phone", "wechat", "qq", "telegram", "url", "email"; or "term"
    matched: str  # the text as written in the input
    value: str  # normalised: E.164-like phone, the id, a URL's host, an email, a term as listed
    start: int
    end: int
    confidence: float  # 0..1: how sure that this is what `kind` says
    list_name: str | None = None  # terms: the list (file stem) it comes from


@dataclass(frozen=True)
class _View:
    """The text as the rules read it; each of its characters spans ``[starts[i], ends[i])``
    of the input (a spoken digit word spans the whole word)."""

    text: str
    starts: list[int]
    ends: list[int]

    def source(self, start: int, end: int) -> tuple[int, int]:
        return self.starts[start], self.ends[end - 1]


_SPOKEN_DIGIT = {"〇": "0", "零": "0", "幺": "1", "一": "1", "二": "2", "三": "3", "四": "4"}
_SPOKEN_DIGIT |= {"五": "5", "六": "6", "七": "7", "八": "8", "九": "9"}
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_SPOKEN_DIGIT |= {word: str(digit) for digit, word in enumerate(_WORDS)} | {"oh": "0"}
_ZH_DIGIT = "[〇零幺一二三四五六七八九]"
_EN_DIGIT = rf"(?:{'|'.join(_WORDS)}|oh)"
# Five or more digits read out one by one: a run of quantities never looks like this.
_SPOKEN_RUN = re.compile(
    rf"{_ZH_DIGIT}(?:[\s,，、\-]?{_ZH_DIGIT}|\d){{4,}}"
    rf"|(?<![a-z]){_EN_DIGIT}(?:[\s,\-]+{_EN_DIGIT}){{4,}}(?![a-z])",
    re.IGNORECASE,
)
_SPOKEN_TOKEN = re.compile(rf"{_ZH_DIGIT}|{_EN_DIGIT}|\d", re.IGNORECASE)


def _view(text: str) -> _View:
    folded = [
        (out, i, i + 1)
        for i, ch in enumerate(text)
        if unicodedata.category(ch) != "Cf"  # zero-width characters hide nothing from a reader
        for out in unicodedata.normalize("NFKC", ch)
    ]
    plain = "".join(ch for ch, _, _ in folded)
    kept: list[tuple[str, int, int]] = []
    copied = 0
    for run in _SPOKEN_RUN.finditer(plain):
        kept += folded[copied : run.start()]
        # The digits alone: the pauses a transcript writes between them say nothing.
        for token in _SPOKEN_TOKEN.finditer(plain, run.start(), run.end()):
            digit = _SPOKEN_DIGIT.get(token.group().lower(), token.group())
            kept.append((digit, folded[token.start()][1], folded[token.end() - 1][2]))
        copied = run.end()
    kept += folded[copied:]
    return _View("".join(ch for ch, _, _ in kept), [s for _, s, _ in kept], [e for *_, e in kept])


# --- phone numbers -------------------------------------------------------------------------

_SEP = r"[ \t\u00a0.\-–—_·•*~/\\|]"  # what people put between digits, to group or to evade
_GAP = rf"{_SEP}{{0,3}}"
_NOT_AFTER_DIGITS = r"(?!\d)(?![.\-/]\d)"
_MOBILE = re.compile(
    rf"(?<!\d)(?<!\d[.\- ])(?P<prefix>(?:\+|00)\s?86{_GAP}|86[ \-])?"
    rf"(?P<num>1{_GAP}[3-9](?:{_GAP}\d){{9}}){_NOT_AFTER_DIGITS}"
)
_LANDLINE = re.compile(
    rf"(?<![\d+])(?<!\d[.\-])(?P<prefix>(?:\+|00)\s?86{_GAP})?"
    rf"(?P<area>\(\s?0?\d{{2,3}}\s?\)|0?\d{{2,3}})(?P<sep>{_SEP}{{0,3}})"
    rf"(?P<sub>\d{{3,4}}{_SEP}?\d{{3,4}}){_NOT_AFTER_DIGITS}"
)
_AREA_CODE = re.compile(r"10|2\d|[3-9]\d\d")  # without its 0: Beijing, 02X, then 0XXX
_INTERNATIONAL = re.compile(
    r"(?<![0-9A-Za-z_+])(?P<plus>\+|00)(?!86)\s?(?P<body>[1-9]\d*(?:[ .\-]{1,2}\(?\d+\)?|\(\d+\))*)"
)
# Total digits, country code included, where the country is a common one; others: 8 to 15.
_CC_LENGTHS = {"1": (11,), "7": (11,), "33": (11,), "44": (11, 12), "49": (10, 11, 12, 13)}
_CC_LENGTHS |= {"61": (11,), "65": (10,), "81": (11, 12), "82": (10, 11, 12), "852": (11,)}
_CC_LENGTHS |= {"853": (11,), "886": (11, 12), "60": (10, 11, 12), "66": (10, 11), "91": (12,)}
_NANP = re.compile(
    rf"(?<![\d+])(?:\((?P<paren>[2-9]\d\d)\)\s?|(?P<area>[2-9]\d\d)(?P<sep>[ .\-]))"
    rf"(?P<exchange>[2-9]\d\d)[ .\-](?P<line>\d{{4}}){_NOT_AFTER_DIGITS}"
)
_PHONE_CUE = re.compile(
    r"电话|電話|手机|手機|座机|座機|热线|熱線|致电|致電|拨打|撥打|联系|聯繫|聯系|号码|號碼|微信"
    r"|(?<![a-z])(?:tel|phone|mobile|call|cell|whatsapp|contact|hotline|vx|wx)(?![a-z])",
    re.IGNORECASE,
)
_PHONE_CUE_AFTER = re.compile(r"\s*[(（]?\s*(?:微信同号|同微信|微信|电话|電話|手机|手機)")
_NOT_PHONE_CUE = re.compile(
    r"订单|訂單|单号|單號|编号|編號|快递|快遞|运单|運單|流水|价格|價格|金额|金額|票号|身份证|[#¥￥$€£]"
    r"|播放|观看|觀看|粉丝|粉絲|点赞|點讚|阅读|閱讀"
    r"|(?<![a-z])(?:order|invoice|tracking|sku|serial|isbn|no\.?|price)(?![a-z])",
    re.IGNORECASE,
)
# An amount or a count: 13800000000 元, 15234567890 次播放, ... views.
_NOT_PHONE_AFTER = re.compile(
    r"\s*(?:元|块|萬|万|亿|億|年|次|人|个|個|rmb|cny|usd|yuan|dollars?|views|plays|likes)",
    re.IGNORECASE,
)


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _mobile_shape(number: str) -> float:
    """How much a mobile number's grouping looks like one: 138 1234 5678, one digit at a time
    (to evade), or groups of three or more; other groupings are more likely numbers side by
    side: a date and a count, a version, an address (139.81.234.567)."""
    groups = tuple(len(group) for group in re.findall(r"\d+", number))
    if groups in {(11,), (3, 4, 4), (3, 8), (7, 4), (4, 4, 3)} or set(groups) == {1}:
        return 0.9
    # Most digits standing alone: spaced out to evade, or full-width digits OCR reads apart
    # ("１３９ ８７６５" as "1 3 9 876 5").
    return 0.8 if min(groups) >= 3 or groups.count(1) >= 6 else 0.45


def _landline(match: re.Match[str]) -> tuple[str, float] | None:
    area, sub = _digits(match["area"]), _digits(match["sub"])
    if not match["prefix"] and not area.startswith("0"):
        return None
    area = area.removeprefix("0")
    separated = bool(match["sep"] or match["prefix"]) or "(" in match["area"]
    if not separated:  # one run of digits: the area code is as long as its first digits say
        digits = area + sub
        size = 2 if digits.startswith(("10", "2")) else 3
        area, sub = digits[:size], digits[size:]
    if not _AREA_CODE.fullmatch(area) or not 7 <= len(sub) <= 8:
        return None
    # One run of digits with a 0 in front may as well be an order or an issue number.
    return f"+86{area}{sub}", 0.85 if separated else 0.45


def _valid_international(groups: list[str]) -> float:
    """0 where the digit groups (country code first) make no phone number, else a confidence.
    Where the country is not one of the common ones, some group after the first must hold
    three digits or more: "+5 10 15 20 25" is a row of numbers."""
    digits = "".join(groups)
    for size in (1, 2, 3):
        if (lengths := _CC_LENGTHS.get(digits[:size])) is not None:
            return 0.9 if len(digits) in lengths else 0.0
    rest = groups[1:] or [groups[0][3:]]  # one run of digits: past the longest country code
    grouped = max(map(len, rest)) >= 3
    return 0.75 if grouped and 8 <= len(digits) <= 15 else 0.0


def _phone_numbers(text: str) -> Iterator[tuple[int, int, str, float]]:
    """Phone numbers in the view: ``(start, end, E.164 value, confidence without context)``."""
    for match in _MOBILE.finditer(text):
        base = 0.95 if match["prefix"] else _mobile_shape(match["num"])
        yield match.start(), match.end(), "+86" + _digits(match["num"]), base
    for match in _LANDLINE.finditer(text):
        if (parsed := _landline(match)) is not None:
            yield match.start(), match.end(), *parsed
    for match in _INTERNATIONAL.finditer(text):
        # The longest run of its digit groups that makes a number: a year may follow it.
        groups: list[str] = []
        best = None
        for group in re.finditer(r"\d+", match["body"]):
            groups.append(group.group())
            if confidence := _valid_international(groups):
                best = (match.start("body") + group.end(), "+" + "".join(groups), confidence)
        if best is not None:
            end, value, confidence = best
            yield match.start(), end, value, confidence - (0.1 if match["plus"] == "00" else 0)
    for match in _NANP.finditer(text):
        area = match["paren"] or match["area"]
        base = 0.75 if match["paren"] else 0.6 if match["sep"] != " " else 0.45
        yield match.start(), match.end(), f"+1{area}{match['exchange']}{match['line']}", base


def _phone_in_context(text: str, start: int, end: int, base: float) -> float:
    """A cue word just before (电话, tel, call, …) or after (微信同号) makes a number a phone;
    an order number's, a price's or a tracking number's cue, nearer, makes it something else."""
    before = text[max(0, start - 16) : start].rsplit("\n", 1)[-1]
    after = text[end : end + 8].split("\n", 1)[0]
    if _NOT_PHONE_AFTER.match(after) or before.rstrip().endswith(("¥", "￥", "$", "€", "£")):
        return 0.2
    cue = max((m.end() for m in _PHONE_CUE.finditer(before)), default=-1)
    not_cue = max((m.end() for m in _NOT_PHONE_CUE.finditer(before)), default=-1)
    if not_cue > cue:
        return 0.3
    if cue >= 0 or _PHONE_CUE_AFTER.match(after):
        return max(base, 0.97)
    if before[-1:].isascii() and before[-1:].isalpha():  # part of a code such as SKU13812345678
        return min(base, 0.4)
    return base


def _phone_candidates(text: str) -> Iterator[tuple[str, int, int, str, float]]:
    for start, end, value, base in _phone_numbers(text):
        yield "phone", start, end, value, _phone_in_context(text, start, end, base)


# --- messenger ids -------------------------------------------------------------------------

# What may stand between a cue and the id: 号, id, a colon, 是 (微信号是 abc123), spaces.
_CUE_TAIL = r"(?P<tail>\s*(?:号码|號碼|号|號|id)?\s*(?:[:：=]|是|为|為)?\s*)"
_EXPLICIT_TAIL = re.compile(r"[:：=是为為]")
_MOBILE_ID = r"(?:\+?86[ \-]?)?1[3-9]\d(?:[ \-]?\d){8}(?!\d)"
_WECHAT = re.compile(
    r"(?P<cue>微信(?:公众号|公眾號)?|公众号|公眾號|威信|薇信|v信|(?:加|\+|➕)\s*v(?![a-z])"
    r"|(?<![a-z0-9_])(?:vx|wx|wechat|weixin)(?![a-z]))"
    + _CUE_TAIL
    + rf"(?P<id>{_MOBILE_ID}|[a-z][-_a-z0-9]{{5,19}}(?![-_a-z0-9@]))",
    re.IGNORECASE,
)
_QQ = re.compile(
    r"(?P<cue>(?<![a-z0-9_])q\s?q(?![a-z])|扣扣|企鹅|企鵝|(?<![a-z0-9_])q(?=群))(?:群|号|號)?"
    + _CUE_TAIL
    + r"(?P<id>[1-9](?:[ \-]?\d){4,10})(?!\d)",
    re.IGNORECASE,
)
_TELEGRAM_LINK = re.compile(
    r"(?<![a-z0-9_.])(?:https?://)?(?:t|telegram)\.me/(?P<id>(?:joinchat/|\+)?[a-z0-9_\-]{3,64})",
    re.IGNORECASE,
)
_TELEGRAM = re.compile(
    r"(?P<cue>(?<![a-z0-9_])(?:telegram|tg)(?![a-z])|电报|電報|纸飞机|紙飛機)"
    + _CUE_TAIL
    + r"(?P<at>@)?(?P<id>[a-z][a-z0-9_]{4,31})(?![a-z0-9_])",
    re.IGNORECASE,
)


def _id_confidence(match: re.Match[str]) -> float:
    """An id after a cue: sure where it holds digits or marks, or follows a colon, a Chinese
    cue or slang (vx, wx); an English word after an English name ("WeChat account",
    "Telegram channel") is likely just a word."""
    ident = match["id"]
    if re.search(r"[\d_\-]", ident) or match.groupdict().get("at"):
        return 0.95
    cue = match["cue"].lower()
    named = cue in {"wechat", "telegram", "tg"}
    return 0.45 if named and not _EXPLICIT_TAIL.search(match["tail"]) else 0.85


def _id_candidates(text: str) -> Iterator[tuple[str, int, int, str, float]]:
    for match in _WECHAT.finditer(text):
        ident = match["id"]
        mobile = re.fullmatch(_MOBILE_ID, ident)
        value = _digits(ident)[-11:] if mobile else ident
        yield "wechat", match.start(), match.end(), value, 0.97 if mobile else _id_confidence(match)
    for match in _QQ.finditer(text):
        spaced = not match["id"].isdigit()
        yield "qq", match.start(), match.end(), _digits(match["id"]), 0.9 if spaced else 0.95
    for match in _TELEGRAM_LINK.finditer(text):
        yield "telegram", match.start(), match.end(), match["id"], 0.97
    for match in _TELEGRAM.finditer(text):
        yield "telegram", match.start(), match.end(), match["id"], _id_confidence(match)


# --- links and addresses -------------------------------------------------------------------


def _names(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


_TLDS_COMMON = _names(
    "com net org cn top xyz vip cc io tv info biz co ai hk tw uk jp kr ru de fr sg ly gg icu ws la"
)
# Real top-level domains that are also English words or file types, left out of bare domains:
# it, in, is, to, us, one, zip, mov, py, sh, md, rs, pl, so, ltd (Co.Ltd), ...
_TLDS_WORDS = _names(
    "club shop site online store live link tech app dev fun pro asia mobi cloud life world work"
    " me news email space website group today games bet casino chat video edu gov int eu au"
    " ca nz my ph vn th id"
)
_TLDS = _TLDS_COMMON | _TLDS_WORDS
_EMAIL_TLDS = _TLDS | _names("in it is to us de nl es se ch be at pl")
_NOT_A_NAME = _names("the a an of and or to in on at by for this that its my our your big new")
_LABEL = r"[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?"
# A dot, or what stands for one to evade a filter: 。 " . " [.] (dot) 点 " dot ".
_DOT = (
    r"(?:\s?\.(?=[a-z0-9])|\s+dot\s+"
    r"|\s*(?:。|\s\.\s|[\[(【{<]\s*(?:\.|。|dot|点)\s*[\])】}>]|点)\s*)"
)
_PATH = rf"/[^\s<>\"',，。、“”()（）\[\]【】{CJK}]*"
_URL = re.compile(
    rf"(?<![a-z])(?:h(?:tt|xx)ps?|ftp)://(?:[^\s/@]+@)?(?P<host>[a-z0-9\-]+(?:\.[a-z0-9\-]+)+)(?::\d+)?(?:{_PATH})?",
    re.IGNORECASE,
)
_DOMAIN = re.compile(
    rf"(?<![a-z0-9_@.\-/])(?P<host>(?:{_LABEL}{_DOT}){{1,6}}(?P<tld>[a-z]{{2,12}}))(?![a-z0-9_\-])"
    rf"(?P<path>{_PATH})?",
    re.IGNORECASE,
)
_EMAIL = re.compile(
    r"(?<![a-z0-9._%+\-])(?P<user>[a-z0-9](?:[a-z0-9._%+\-]{0,62}[a-z0-9_])?)"
    rf"\s?(?P<at>@|\(at\)|\[at\])\s?(?P<host>(?:{_LABEL}\.){{1,6}}(?P<tld>[a-z]{{2,12}}))(?![a-z0-9\-])",
    re.IGNORECASE,
)
_DOT_WRITTEN = re.compile(
    r"\s*(?:[\[(【{<]\s*(?:\.|。|dot|点)\s*[\])】}>]|。|点)\s*|\s+dot\s+", re.IGNORECASE
)


def _host(host: str) -> str:
    written = "".join(_DOT_WRITTEN.sub(".", host).split())
    return written.lower().strip(".").removeprefix("www.")


def _domain_confidence(match: re.Match[str]) -> float:
    """0 where a dotted word is no domain (report.pdf, v1.2, 3.14), else a confidence."""
    host, tld = match["host"], match["tld"].lower()
    if tld not in _TLDS:
        return 0.0
    if match["tld"].istitle() and not host[0].isupper():  # "home.It was late": two sentences
        return 0.4
    if re.fullmatch(r"[a-z0-9.\-]+", host, re.IGNORECASE):
        if host.lower().startswith("www.") or match["path"]:
            return 0.95
        return 0.9 if tld in _TLDS_COMMON else 0.75
    if tld not in _TLDS_COMMON:  # written to evade: only where the ending is a usual one
        return 0.0
    if re.search(r"\sdot\s", host, re.IGNORECASE):  # "the dot com bubble" is prose
        name = host.split()[0].lower()
        return 0.0 if name in _NOT_A_NAME else 0.6
    return 0.9


def _link_candidates(text: str) -> Iterator[tuple[str, int, int, str, float]]:
    for match in _URL.finditer(text):
        end = match.start() + len(match.group().rstrip(".,;:!?'\""))
        yield "url", match.start(), end, _host(match["host"]), 0.97
    for match in _DOMAIN.finditer(text):
        if confidence := _domain_confidence(match):
            end = match.start() + len(match.group().rstrip(".,;:!?'\""))
            yield "url", match.start(), end, _host(match["host"]), confidence
    for match in _EMAIL.finditer(text):
        if match["tld"].lower() in _EMAIL_TLDS:
            value = f"{match['user']}@{match['host']}".lower()
            yield "email", match.start(), match.end(), value, 0.97 if match["at"] == "@" else 0.9


# --- all together --------------------------------------------------------------------------

# Where two hits overlap, the longer stays; of two as long, the kind first here.
_PRIORITY = {"email": 0, "telegram": 1, "qq": 2, "wechat": 3, "url": 4, "phone": 5}


def find_contacts(text: str) -> list[TextHit]:
    """Phone numbers, messenger ids, links and email addresses in ``text``, in text order.

    Overlapping findings keep the longer one (a domain inside an email is the email), except
    that a phone number given as a WeChat id is both. Hits below 0.5 are numbers that may be
    something else; they are kept for thresholds to decide."""
    view = _view(text)
    hits: list[TextHit] = []
    found = chain(
        _phone_candidates(view.text), _id_candidates(view.text), _link_candidates(view.text)
    )
    for kind, start, end, value, confidence in found:
        source_start, source_end = view.source(start, end)
        matched = text[source_start:source_end]
        hits.append(TextHit(kind, matched, value, source_start, source_end, confidence))
    kept: list[TextHit] = []
    for hit in sorted(hits, key=lambda h: (h.start - h.end, _PRIORITY[h.kind], -h.confidence)):
        if all(_apart(hit, other) for other in kept):
            kept.append(hit)
    return sorted(kept, key=lambda h: (h.start, h.end))


def _apart(hit: TextHit, other: TextHit) -> bool:
    if hit.end <= other.start or other.end <= hit.start:
        return True
    return {hit.kind, other.kind} == {"wechat", "phone"} and hit.value[-11:] == other.value[-11:]
