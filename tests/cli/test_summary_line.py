"""How ``reelsense result`` and the demo print the summary stage's answer."""

from __future__ import annotations

from devkit.result_view import summary_line


def test_an_answer_is_its_category_tags_and_summary_printed_as_text() -> None:
    body = {
        "outputs": {
            "summary": {
                "data": {
                    "summary": "Bread [bold]and[/] tides.",
                    "tags": ["bread", "sea"],
                    "category": "education",
                },
                "segments": [],
            }
        }
    }
    line = summary_line(body)
    assert line is not None
    assert line.plain == "category: education; tags: bread, sea\nsummary: Bread [bold]and[/] tides."


def test_no_answer_says_why_and_no_stage_prints_nothing() -> None:
    missing = {"outputs": {"summary": {"data": {"summary": None, "reason": "no text"}}}}
    line = summary_line(missing)
    assert line is not None
    assert line.plain == "summary: none (no text)"
    assert summary_line({"outputs": {}}) is None
    assert summary_line({}) is None
