"""Review text rules: contact details (stages.review_contacts, through stages.review_text),
normalisation, and term lists read from real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.review_text import TermLists, TextHit, find_contacts, normalise

TAKEN = 0.5  # from this confidence a hit counts


def taken(text: str) -> list[TextHit]:
    return [hit for hit in find_contacts(text) if hit.confidence >= TAKEN]


def only_hit(text: str, kind: str) -> TextHit:
    hits = [hit for hit in taken(text) if hit.kind == kind]
    assert len(hits) == 1, (text, find_contacts(text))
    hit = hits[0]
    assert text[hit.start : hit.end] == hit.matched
    return hit


# --- phone numbers -------------------------------------------------------------------------

MOBILE = "+8613812345678"


@pytest.mark.parametrize(
    ("text", "value", "matched"),
    [
        ("13812345678", MOBILE, "13812345678"),
        ("我的号码13812345678请记住", MOBILE, "13812345678"),
        ("138 1234 5678", MOBILE, "138 1234 5678"),
        ("138-1234-5678", MOBILE, "138-1234-5678"),
        ("+86 138 1234 5678", MOBILE, "+86 138 1234 5678"),
        ("+8613812345678", MOBILE, "+8613812345678"),
        ("0086 13812345678", MOBILE, "0086 13812345678"),
        ("86-13812345678", MOBILE, "86-13812345678"),
        ("１３８１２３４５６７８", MOBILE, "１３８１２３４５６７８"),
        ("１３８－１２３４－５６７８", MOBILE, "１３８－１２３４－５６７８"),
        ("1 3 8 1 2 3 4 5 6 7 8", MOBILE, "1 3 8 1 2 3 4 5 6 7 8"),
        # Full-width digits as OCR reads them: each wide digit apart, some run together.
        ("1 3 8 123 4 5 6 7 8", MOBILE, "1 3 8 123 4 5 6 7 8"),
        ("1.3.8.1.2.3.4.5.6.7.8", MOBILE, "1.3.8.1.2.3.4.5.6.7.8"),
        ("1-3-8-1-2-3-4-5-6-7-8", MOBILE, "1-3-8-1-2-3-4-5-6-7-8"),
        ("138\u200b1234\u200b5678", MOBILE, "138\u200b1234\u200b5678"),
        ("一三八一二三四五六七八", MOBILE, "一三八一二三四五六七八"),
        ("幺三八幺二三四五六七八", MOBILE, "幺三八幺二三四五六七八"),
        ("打一三八 一二三四 五六七八就行", MOBILE, "一三八 一二三四 五六七八"),
        ("一三八,一二三四,五六七八", MOBILE, "一三八,一二三四,五六七八"),
        ("一三九零零零零一一一一", "+8613900001111", "一三九零零零零一一一一"),
        (
            "one three eight one two three four five six seven eight",
            MOBILE,
            "one three eight one two three four five six seven eight",
        ),
        ("Call One Three Eight, one two three four, five six seven eight.", MOBILE, None),
        ("010-12345678", "+861012345678", "010-12345678"),
        ("(0755) 8888 6666", "+8675588886666", "(0755) 8888 6666"),
        ("（0755）88886666", "+8675588886666", "（0755）88886666"),
        ("0755-88886666", "+8675588886666", "0755-88886666"),
        ("021 6123 4567", "+862161234567", "021 6123 4567"),
        ("0571-8765432", "+865718765432", "0571-8765432"),
        ("+86 10 5551234", "+86105551234", "+86 10 5551234"),
        ("+86-755-8888-6666", "+8675588886666", "+86-755-8888-6666"),
        ("+44 20 7946 0958", "+442079460958", "+44 20 7946 0958"),
        ("+1 (415) 555-0100", "+14155550100", "+1 (415) 555-0100"),
        ("+852 9123 4567", "+85291234567", "+852 9123 4567"),
        ("+81 3-1234-5678", "+81312345678", "+81 3-1234-5678"),
        ("+49 30 12345678", "+493012345678", "+49 30 12345678"),
        ("+44 20 7946 0958 2024", "+442079460958", "+44 20 7946 0958"),
        ("(415) 555-0100", "+14155550100", "(415) 555-0100"),
        ("call 415-555-0100", "+14155550100", "415-555-0100"),
    ],
)
def test_phone_numbers_are_found_with_their_e164_value(
    text: str, value: str, matched: str | None
) -> None:
    hit = only_hit(text, "phone")
    assert hit.value == value
    if matched is not None:
        assert hit.matched == matched


@pytest.mark.parametrize(
    "text",
    [
        "电话：13812345678",
        "電話 13812345678",
        "手机 138 1234 5678",
        "手機號碼 138-1234-5678",
        "联系 13812345678",
        "tel:13812345678",
        "Call me at 138 1234 5678",
        "13812345678（微信同号）",
        "座机 0755-88886666",
        "热线 01012345678",
        "phone 415 555 0100",
    ],
)
def test_a_cue_word_makes_a_number_surely_a_phone(text: str) -> None:
    assert only_hit(text, "phone").confidence >= 0.95


def test_a_bare_mobile_number_is_likely_a_phone() -> None:
    assert 0.85 <= only_hit("13812345678", "phone").confidence < 0.95


@pytest.mark.parametrize(
    "text",
    [
        "¥1380000",
        "价格 ¥13800000000",
        "售价 13800000000 元",
        "共 13800 元",
        "2024年",
        "2024年5月1日",
        "2024-05-01",
        "2024/05/01 12:30",
        "2024.05.01",
        "12:30:45",
        "2024-05-01 12:30:45",
        "订单号 20240501123456",
        "订单号：13812345678",
        "快递单号 13812345678",
        "order no. 13812345678",
        "SKU13812345678",
        "身份证 110101199003071234",
        "timestamp 1714550400123",
        "1714550400",
        "第02112345678期",
        "version 13.8.1234.5678",
        "139.81.234.567",
        "+5 10 15 20 25 30",
        "Score 200 300 4000",
        "123-456-7890",
        "6222 0212 3456 7890 123",
        "v1.2.3",
        "3.14",
        "第3集 共12集",
        "1380 0000 元",
        "一二三四五六七八九十",
        "播放量 15234567890",
        "15234567890 次播放",
        "开奖号码 13 15 22 28 31 07",
        "1990-05-08 476 642 4373",
        "170 167 2247 1991/09/27 06:20",
        "时间戳 1750276138 7% off",
    ],
)
def test_numbers_that_may_be_something_else_are_not_taken(text: str) -> None:
    assert [hit for hit in taken(text) if hit.kind == "phone"] == []


def test_a_phone_inside_a_link_or_an_address_is_part_of_it() -> None:
    assert [hit.kind for hit in taken("https://example.com/13812345678")] == ["url"]
    assert [hit.kind for hit in taken("13812345678@163.com")] == ["email"]


# --- messenger ids -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ident", "value"),
    [
        ("微信：abc_123", "abc_123", "abc_123"),
        ("微信号 abc12345", "abc12345", "abc12345"),
        ("微信號：abc12345", "abc12345", "abc12345"),
        ("加我微信abc12345", "abc12345", "abc12345"),
        ("VX: wxid_abc123", "wxid_abc123", "wxid_abc123"),
        ("vx abc12345", "abc12345", "abc12345"),
        ("vx号：abc12345", "abc12345", "abc12345"),
        ("V信：hello2024", "hello2024", "hello2024"),
        ("薇信 abc-123456", "abc-123456", "abc-123456"),
        ("威信：abc12345", "abc12345", "abc12345"),
        ("加V：abc12345", "abc12345", "abc12345"),
        ("加v abc12345", "abc12345", "abc12345"),
        ("wx: abc12345", "abc12345", "abc12345"),
        ("Call wx fsaevfhydvdr!", "fsaevfhydvdr", "fsaevfhydvdr"),
        ("WeChat: abc12345", "abc12345", "abc12345"),
        ("WeChat ID: abc12345", "abc12345", "abc12345"),
        ("微信公众号：abcdef", "abcdef", "abcdef"),
        ("ｖｘ：ａｂｃ１２３４５", "ａｂｃ１２３４５", "abc12345"),
        ("微信：13812345678", "13812345678", "13812345678"),
        ("vx 138 1234 5678", "138 1234 5678", "13812345678"),
    ],
)
def test_wechat_ids_follow_their_cue(text: str, ident: str, value: str) -> None:
    hit = only_hit(text, "wechat")
    assert hit.matched.endswith(ident)
    assert hit.value == value


def test_a_wechat_id_that_is_a_phone_number_is_both() -> None:
    kinds = {hit.kind: hit for hit in taken("微信：138 1234 5678")}
    assert set(kinds) == {"wechat", "phone"}
    assert kinds["wechat"].value == "13812345678"
    assert kinds["phone"].value == MOBILE
    assert kinds["phone"].confidence >= 0.95


@pytest.mark.parametrize(
    "text",
    [
        "WeChat account",
        "follow our WeChat official account",
        "用微信支付",
        "wx.login()",
        "微信 abc",
        "twxabcdef123",
        "微信是一种社交软件",
    ],
)
def test_words_near_wechat_are_not_ids(text: str) -> None:
    assert [hit for hit in taken(text) if hit.kind == "wechat"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("QQ：12345678", "12345678"),
        ("QQ号 123456789", "123456789"),
        ("qq 10001", "10001"),
        ("扣扣：987654321", "987654321"),
        ("企鹅号 123456789", "123456789"),
        ("QQ群：12345678", "12345678"),
        ("Q群 12345678", "12345678"),
        ("ＱＱ：１２３４５６７８", "12345678"),
        ("QQ 一二三四五六七八", "12345678"),
        ("QQ：13812345678", "13812345678"),
    ],
)
def test_qq_numbers_follow_their_cue(text: str, value: str) -> None:
    assert only_hit(text, "qq").value == value
    assert [hit.kind for hit in taken(text)] == ["qq"]


@pytest.mark.parametrize("text", ["QQ音乐", "QQ 123", "QQ空间很好玩", "12345678"])
def test_no_qq_without_cue_and_number(text: str) -> None:
    assert [hit for hit in taken(text) if hit.kind == "qq"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("t.me/somebody", "somebody"),
        ("https://t.me/some_body", "some_body"),
        ("加群 t.me/joinchat/AbCdEf", "joinchat/AbCdEf"),
        ("telegram: @some_body", "some_body"),
        ("TG @dealer88", "dealer88"),
        ("电报：@dealer88", "dealer88"),
        ("纸飞机 dealer_88", "dealer_88"),
    ],
)
def test_telegram_links_and_handles(text: str, value: str) -> None:
    assert only_hit(text, "telegram").value == value
    assert [hit.kind for hit in taken(text)] == ["telegram"]


@pytest.mark.parametrize("text", ["telegram channel", "follow @somebody", "I love tg"])
def test_no_telegram_without_link_or_handle_after_cue(text: str) -> None:
    assert [hit for hit in taken(text) if hit.kind == "telegram"] == []


# --- links and addresses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "matched"),
    [
        ("https://www.Example.com/a?b=1.", "example.com", "https://www.Example.com/a?b=1"),
        ("http://abc.cn", "abc.cn", "http://abc.cn"),
        ("HTTPS://EXAMPLE.COM", "example.com", "HTTPS://EXAMPLE.COM"),
        ("hxxp://evil.xyz/a", "evil.xyz", "hxxp://evil.xyz/a"),
        ("https://example.com，欢迎", "example.com", "https://example.com"),
        ("访问www.example.com了解", "example.com", "www.example.com"),
        ("example.com", "example.com", "example.com"),
        ("abc.cn", "abc.cn", "abc.cn"),
        ("xx.top", "xx.top", "xx.top"),
        ("t.cn/AbCd", "t.cn", "t.cn/AbCd"),
        ("abc.com.cn", "abc.com.cn", "abc.com.cn"),
        ("12306.cn", "12306.cn", "12306.cn"),
        ("example 。com", "example.com", "example 。com"),
        ("example。com", "example.com", "example。com"),
        ("example[.]com", "example.com", "example[.]com"),
        ("example(.)com", "example.com", "example(.)com"),
        ("example . com", "example.com", "example . com"),
        ("example dot com", "example.com", "example dot com"),
        ("example点com", "example.com", "example点com"),
        ("ｅｘａｍｐｌｅ．ｃｏｍ", "example.com", "ｅｘａｍｐｌｅ．ｃｏｍ"),
        ("example｡com", "example.com", "example｡com"),
        ("更多资源上 abc123.vip 看", "abc123.vip", "abc123.vip"),
    ],
)
def test_urls_and_domains_report_their_host(text: str, value: str, matched: str) -> None:
    hit = only_hit(text, "url")
    assert (hit.value, hit.matched) == (value, matched)


@pytest.mark.parametrize(
    "text",
    [
        "report.pdf",
        "v1.2",
        "3.14",
        "v1.2.3",
        "main.py",
        "archive.zip",
        "photo.jpg and data.xlsx",
        "e.g. this",
        "the dot com bubble",
        "U.S.A.",
        "Mr.Smith",
        "Shenzhen Tech Co.Ltd",
        "i.e. that",
        "node.js",
        "index.html",
        "3.5mm jack",
        "1.5x speed",
        "I went home.It was late",
        "请查看附件 report.pdf 和 data.xlsx",
    ],
)
def test_file_names_versions_and_numbers_are_no_domains(text: str) -> None:
    assert [hit for hit in taken(text) if hit.kind == "url"] == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("name@Example.com", "name@example.com"),
        ("联系邮箱：abc.def@qq.com", "abc.def@qq.com"),
        ("someone(at)example.com", "someone@example.com"),
        ("ｎａｍｅ＠ｅｘａｍｐｌｅ．ｃｏｍ", "name@example.com"),
        ("12345678@qq.com", "12345678@qq.com"),
        ("mail me: a_b@mail.example.co.uk", "a_b@mail.example.co.uk"),
    ],
)
def test_emails_are_lowercased(text: str, value: str) -> None:
    assert only_hit(text, "email").value == value
    assert [hit.kind for hit in taken(text)] == ["email"]


@pytest.mark.parametrize("text", ["icon@2x.png", "@somebody", "a@b"])
def test_no_email_without_a_domain(text: str) -> None:
    assert [hit for hit in taken(text) if hit.kind == "email"] == []


@pytest.mark.parametrize(
    "text",
    [
        "We will meet at the station at 10:30 tomorrow.",
        "The price is $13.99 for 2 items, or 3 for $35.",
        "In 2024 the company grew by 13.8% to 1,234,567 users.",
        "今天天气很好，我们去公园散步吧。",
        "这部电影在2024年5月1日上映，票价38元，时长128分钟。",
        "版本号 v2.3.1 已发布，修复了 12 个问题。",
        "第一名得了九十八分，第二名九十五分。",
        "A cat sat on the mat. It was happy.",
        "",
    ],
)
def test_ordinary_sentences_hold_no_contacts(text: str) -> None:
    assert taken(text) == []


def test_several_contacts_in_one_text_in_order_with_offsets() -> None:
    text = "加微信 abc12345 或致电 010-12345678，官网 www.example.com，邮箱 hi@example.com"
    hits = taken(text)
    assert [hit.kind for hit in hits] == ["wechat", "phone", "url", "email"]
    for hit in hits:
        assert text[hit.start : hit.end] == hit.matched
    assert [hit.start for hit in hits] == sorted(hit.start for hit in hits)


# --- normalise -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("赌 博", "赌博"),
        ("赌*博", "赌博"),
        ("赌。博", "赌博"),
        ("赌 🎲 博", "赌博"),
        ("賭博", "赌博"),
        ("網絡賭博", "网络赌博"),
        ("ＡＢＣ１２３", "abc123"),
        ("Viagra", "viagra"),
        ("v.i.a.g.r.a", "viagra"),
        ("v i a g r a", "viagra"),
        ("V-I-A-G-R-A now", "viagra now"),
        ("x\u200by", "xy"),
        ("Hello   World", "hello world"),
        ("a b", "a b"),
        ("I am a cat", "i am a cat"),
        ("bet 365", "bet 365"),
        ("赌博app", "赌博app"),
    ],
)
def test_normalise(text: str, expected: str) -> None:
    normalised, index = normalise(text)
    assert normalised == expected
    assert len(index) == len(normalised)
    assert index == sorted(index)
    assert all(0 <= i < len(text) for i in index)


def test_normalise_maps_each_character_to_where_it_came_from() -> None:
    text = "快來 賭*博 ＶＩＡＧＲＡ"
    normalised, index = normalise(text)
    assert normalised == "快来赌博 viagra"
    assert [text[i] for i in index] == list("快來賭博 ＶＩＡＧＲＡ")


# --- term lists ----------------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    """Writes ``text`` and moves the mtime on, so that a rewrite within one clock tick is seen."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    stamp = max(path.stat().st_mtime_ns, before + 1_000_000_000)
    os.utime(path, ns=(stamp, stamp))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write(
        tmp_path / "gambling.txt",
        "# gambling terms\n\n赌博\n网络赌博\n六合彩  # lottery\n  \n",
    )
    write(tmp_path / "spam.txt", "viagra\nass\nfree money\n")
    write(tmp_path / "notes.md", "not a list\n")
    return tmp_path


def values(hits: list[TextHit]) -> list[tuple[str, str | None, str]]:
    return [(hit.value, hit.list_name, hit.matched) for hit in hits]


def test_lists_are_read_with_comments_and_blanks_left_out(folder: Path) -> None:
    terms = TermLists(folder, check_every_s=0)
    assert terms.lists == {"gambling": 3, "spam": 3}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("一起来赌博吧", [("赌博", "gambling", "赌博")]),
        ("一起來賭博吧", [("赌博", "gambling", "賭博")]),
        ("赌 博", [("赌博", "gambling", "赌 博")]),
        ("赌*博", [("赌博", "gambling", "赌*博")]),
        ("赌。博", [("赌博", "gambling", "赌。博")]),
        ("赌\u200b博", [("赌博", "gambling", "赌\u200b博")]),
        ("buy VIAGRA now", [("viagra", "spam", "VIAGRA")]),
        ("buy ｖｉａｇｒａ now", [("viagra", "spam", "ｖｉａｇｒａ")]),
        ("buy v.i.a.g.r.a now", [("viagra", "spam", "v.i.a.g.r.a")]),
        ("buy v i a g r a now", [("viagra", "spam", "v i a g r a")]),
        ("买viagra吧", [("viagra", "spam", "viagra")]),
        ("what an ass!", [("ass", "spam", "ass")]),
        ("world class assets passed", []),
        ("get FREE   money", [("free money", "spam", "FREE   money")]),
        ("网络赌博害人", [("网络赌博", "gambling", "网络赌博")]),
        ("买六合彩", [("六合彩", "gambling", "六合彩")]),
        ("# lottery", []),
        ("今天天气很好", []),
    ],
)
def test_terms_match_normalised_text(folder: Path, text: str, expected: list[object]) -> None:
    hits = TermLists(folder, check_every_s=0).find(text)
    assert values(hits) == expected
    for hit in hits:
        assert hit.kind == "term"
        assert text[hit.start : hit.end] == hit.matched


def test_term_offsets_point_into_the_original_text(folder: Path) -> None:
    text = "第一行\n快來 賭*博，还有 Ｖ.Ｉ.Ａ.Ｇ.Ｒ.Ａ"
    hits = TermLists(folder, check_every_s=0).find(text)
    assert [(hit.start, hit.end) for hit in hits] == [(7, 10), (14, 25)]
    assert [hit.matched for hit in hits] == ["賭*博", "Ｖ.Ｉ.Ａ.Ｇ.Ｒ.Ａ"]


def test_confidence_says_how_the_term_was_written(folder: Path) -> None:
    terms = TermLists(folder, check_every_s=0)
    assert [hit.confidence for hit in terms.find("赌博")] == [1.0]
    assert [hit.confidence for hit in terms.find("賭博")] == [1.0]
    assert [hit.confidence for hit in terms.find("赌 博")] == [0.9]
    assert [hit.confidence for hit in terms.find("v.i.a.g.r.a")] == [0.9]
    # A clause mark between two characters may be a sentence ending before the next word.
    assert [hit.confidence for hit in terms.find("我不赌。博物馆很好")] == [0.7]


def test_each_list_reports_its_own_hit(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "赌博\n")
    write(tmp_path / "b.txt", "网络赌博\n赌博\n")
    hits = TermLists(tmp_path, check_every_s=0).find("网络赌博")
    assert values(hits) == [("网络赌博", "b", "网络赌博"), ("赌博", "a", "赌博")]


def test_traditional_terms_match_simplified_text(tmp_path: Path) -> None:
    write(tmp_path / "t.txt", "網絡賭博\n")
    hits = TermLists(tmp_path, check_every_s=0).find("严禁网络赌博")
    assert values(hits) == [("網絡賭博", "t", "网络赌博")]


def test_a_changed_file_is_read_again(folder: Path) -> None:
    terms = TermLists(folder, check_every_s=0)
    assert values(terms.find("赌博 lottery")) == [("赌博", "gambling", "赌博")]
    write(folder / "gambling.txt", "lottery\n")
    assert values(terms.find("赌博 lottery")) == [("lottery", "gambling", "lottery")]
    assert terms.lists == {"gambling": 1, "spam": 3}


def test_added_and_removed_files_are_seen(folder: Path) -> None:
    terms = TermLists(folder, check_every_s=0)
    write(folder / "drugs.txt", "冰毒\n")
    assert values(terms.find("出售冰毒")) == [("冰毒", "drugs", "冰毒")]
    (folder / "gambling.txt").unlink()
    assert terms.find("赌博") == []
    assert terms.lists == {"drugs": 1, "spam": 3}


def test_changes_are_looked_for_at_most_every_check_interval(folder: Path) -> None:
    terms = TermLists(folder, check_every_s=3600)
    write(folder / "gambling.txt", "lottery\n")
    assert values(terms.find("赌博")) == [("赌博", "gambling", "赌博")]
    assert terms.find("lottery") == []


def test_an_unreadable_file_keeps_its_previous_terms(folder: Path) -> None:
    terms = TermLists(folder, check_every_s=0)
    path = folder / "gambling.txt"
    path.write_bytes(b"\xff\xfe\xfa not utf-8")
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    assert values(terms.find("赌博")) == [("赌博", "gambling", "赌博")]
    write(path, "lottery\n")
    assert values(terms.find("lottery")) == [("lottery", "gambling", "lottery")]


def test_no_folder_and_a_missing_folder_hold_no_terms(tmp_path: Path) -> None:
    assert TermLists(None).find("赌博") == []
    assert TermLists(None).lists == {}
    missing = TermLists(tmp_path / "absent", check_every_s=0)
    assert missing.find("赌博") == []
    (tmp_path / "absent").mkdir()
    write(tmp_path / "absent" / "late.txt", "赌博\n")
    assert values(missing.find("赌博")) == [("赌博", "late", "赌博")]


# --- any text ------------------------------------------------------------------------------

_PIECES = st.sampled_from(
    [
        *("138", "1234", "5678", "一三八", "+86", "微信", "：", "abc", "123", ".", "com", "@"),
        *(" ", "-", "(", ")", "/", "\n", "\u200b", "賭", "博", "Ｖ", "qq", "t.me/", "ß", "㎞", "İ"),
    ]
)
_TEXT = st.one_of(st.text(max_size=80), st.lists(_PIECES, max_size=30).map("".join))


@settings(max_examples=300, deadline=None)
@given(text=_TEXT)
def test_any_text_gives_hits_that_point_into_it(text: str) -> None:
    for hit in find_contacts(text):
        assert 0 <= hit.start < hit.end <= len(text)
        assert text[hit.start : hit.end] == hit.matched
        assert 0 <= hit.confidence <= 1
    normalised, index = normalise(text)
    assert len(index) == len(normalised)
    assert all(0 <= i < len(text) for i in index)
    assert index == sorted(index)


@pytest.fixture(scope="module")
def few_terms(tmp_path_factory: pytest.TempPathFactory) -> TermLists:
    folder = tmp_path_factory.mktemp("terms")
    write(folder / "t.txt", "赌博\nabc\n138\nss\n")
    return TermLists(folder, check_every_s=3600)


@settings(max_examples=200, deadline=None)
@given(text=_TEXT)
def test_any_text_gives_term_hits_that_point_into_it(few_terms: TermLists, text: str) -> None:
    for hit in few_terms.find(text):
        assert 0 <= hit.start < hit.end <= len(text)
        assert text[hit.start : hit.end] == hit.matched
