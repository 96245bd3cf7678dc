"""Search terms: words for spaced scripts, character bigrams for Chinese, Japanese, Korean."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.terms import index_terms, terms


def test_words_are_case_folded_and_split_on_punctuation() -> None:
    assert terms("SERVER ROOM B7 — she's at Café-Bar!") == [
        *("server", "room", "b7", "s", "café", "bar"),
    ]


def test_english_function_words_are_left_out() -> None:
    assert terms("What time does the meeting start?") == ["time", "meeting", "start"]
    assert terms("NO ENTRY") == ["no", "entry"]  # a negation is meaning
    assert terms("The") == []


def test_cjk_runs_become_bigrams() -> None:
    assert terms("欢迎光临") == ["欢迎", "迎光", "光临"]
    assert terms("会议9点开始") == ["会议", "9", "点开", "开始"]
    assert terms("東京タワー 서울역") == ["東京", "京タ", "タワ", "ワー", "서울", "울역"]
    assert terms("中") == ["中"]


def test_mixed_text_and_full_width_forms() -> None:
    # NFKC folds full-width Latin and digits into their usual forms.
    assert index_terms("今日特价 ＳＡＬＥ ５０%") == "今日 日特 特价 sale 50"
    assert index_terms("   ...   ") == ""


def test_a_query_word_matches_wherever_the_text_holds_it() -> None:
    text = set(terms("数据中心 SERVER ROOM"))
    assert set(terms("中心")) <= text
    assert set(terms("server")) <= text


@given(st.text(max_size=60))
def test_terms_never_hold_spaces_and_are_stable(text: str) -> None:
    found = terms(text)
    assert all(term and not any(c.isspace() for c in term) for term in found)
    assert terms(index_terms(text)) == found or any(len(t) == 1 for t in found)
