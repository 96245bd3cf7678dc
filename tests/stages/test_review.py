"""The review stage on results whose contents are known: each category scored with its
evidence, decisions by the thresholds (a tenant's own too), the operator's terms read again
when their file changes, and what ``video.done`` and ``video.review`` say of it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.config import ReviewSettings
from core.outputs import VideoOutput
from core.records import Frame, OcrLine, ProbeInfo, VideoRef, VideoResult
from core.review_settings import Thresholds
from core.speech import Speech, SpeechSegment
from core.stage_names import QR, REVIEW
from runtime.messages import done_message_data, review_message_data
from stages.review import ReviewStage

BOX = ((10.0, 10.0), (300.0, 10.0), (300.0, 40.0), (10.0, 40.0))
QR_BOX = [[500.0, 200.0], [620.0, 200.0], [620.0, 320.0], [500.0, 320.0]]


def video(
    shown: Sequence[tuple[float, str]] = (),
    said: Sequence[tuple[float, str]] = (),
    codes: Sequence[tuple[float, str]] = (),
    safety: Sequence[tuple[float, str]] = (),
    tenant: str = "acme",
) -> VideoResult:
    """20 s sampled once a second: each text ``shown`` from its time to the end, each sentence
    ``said`` for 3 s, each QR code's text in the sample at its time, each safety label in the
    description of the sample at its time."""
    frames = []
    for second in range(20):
        lines = [OcrLine(text, 0.95, BOX) for at, text in shown if at <= second]
        extras: dict[str, Any] = {
            QR: [
                {"text": text, "format": "QRCode", "box": QR_BOX}
                for at, text in codes
                if at == second
            ]
        }
        labels = [label for at, label in safety if at == second]
        description = {"caption": "a person on a stage", "safety": labels} if labels else None
        frames.append(
            Frame(
                second,
                float(second),
                None,
                ocr_lines=lines,
                description=description,
                extras=extras,
            )
        )
    segments = tuple(SpeechSegment(at, at + 3.0, text, -0.2, 0.01) for at, text in said)
    speech = Speech("done", segments, language="zh", audio_s=20.0)
    probe = ProbeInfo("mp4", "h264", 1280, 720, 25.0, 20.0, 500, 1, 2000)
    ref = VideoRef("clip", "file:///clip.mp4", tenant=tenant)
    return VideoResult(ref, "v1", probe, frames, datetime.now(UTC), speech=speech)


def category(output: VideoOutput, name: str) -> dict[str, Any]:
    found: dict[str, Any] = output.data["categories"][name]
    return found


def test_a_clean_video_passes_with_no_evidence() -> None:
    stage = ReviewStage(ReviewSettings())
    output = stage.analyse(
        video(
            shown=[(0, "欢迎来到2024年春季发布会"), (5, "价格 ¥1380")], said=[(2, "今天天气很好")]
        )
    )
    assert output.data["decision"] == "pass"
    for name in ("contact", "qr", "terms", "visual"):
        assert category(output, name) == {
            "score": 0.0,
            "decision": "pass",
            "findings": 0,
            "evidence": [],
        }
    assert output.segments == ()


def test_a_phone_number_on_screen_and_said_is_scored_with_its_evidence() -> None:
    stage = ReviewStage(ReviewSettings())
    output = stage.analyse(
        video(shown=[(4, "咨询电话 138 1234 5678")], said=[(9, "加我微信 abc_123456 了解更多")])
    )
    contact = category(output, "contact")
    assert contact["decision"] in ("review", "block")
    assert output.data["decision"] == contact["decision"]
    by_source = {e["source"]: e for e in contact["evidence"]}
    shown, said = by_source["text"], by_source["speech"]
    assert shown["kind"] == "phone"
    assert "13812345678" in shown["value"]
    assert (shown["start_s"], shown["frame_s"]) == (4.0, 4.0)
    assert shown["box"] == [list(point) for point in BOX]
    assert said["kind"] == "wechat"
    assert said["value"].lower() == "abc_123456"
    assert (said["start_s"], said["end_s"], said["frame_s"]) == (9.0, 12.0, None)
    # Two independent findings: more sure than either alone.
    assert contact["score"] > max(shown["confidence"], said["confidence"])
    kinds = {segment.kind for segment in output.segments}
    assert kinds == {"review"}
    assert any("13812345678" in segment.text for segment in output.segments)


def test_a_qr_code_is_a_finding_and_its_link_a_contact() -> None:
    stage = ReviewStage(ReviewSettings())
    output = stage.analyse(
        video(codes=[(6, "https://spam.example.com/join"), (7, "https://spam.example.com/join")])
    )
    qr = category(output, "qr")
    assert qr["findings"] == 1  # one code, shown in two samples
    (evidence,) = qr["evidence"]
    assert (evidence["start_s"], evidence["end_s"], evidence["frame_s"]) == (6.0, 8.0, 6.0)
    assert evidence["box"] == QR_BOX
    assert qr["decision"] == "review"
    (link,) = category(output, "contact")["evidence"]
    assert (link["kind"], link["source"], link["value"]) == ("url", "qr", "spam.example.com")


def test_thresholds_decide_and_a_tenants_own_come_first() -> None:
    settings = ReviewSettings(
        thresholds={"qr": Thresholds(review=0.5, block=0.8)},
        tenant_thresholds={"lenient": {"qr": Thresholds(review=0.95, block=1.01)}},
    )
    stage = ReviewStage(settings)
    codes = [(3, "hello")]
    assert stage.analyse(video(codes=codes)).data["decision"] == "block"
    assert stage.analyse(video(codes=codes, tenant="lenient")).data["decision"] == "pass"
    assert stage.version_params() != ReviewStage(ReviewSettings()).version_params()


def test_the_vlms_safety_labels_are_visual_findings() -> None:
    output = ReviewStage(ReviewSettings()).analyse(video(safety=[(2, "weapons"), (3, "weapons")]))
    visual = category(output, "visual")
    assert visual["decision"] == "review"
    assert [e["kind"] for e in visual["evidence"]] == ["weapons", "weapons"]
    assert visual["score"] == 0.8  # one label, however many samples show it


def test_terms_are_found_in_any_script_and_read_again_when_changed(tmp_path: Path) -> None:
    terms = tmp_path / "terms"
    terms.mkdir()
    (terms / "gambling.txt").write_text("# the operator's list\n赌博\n", encoding="utf-8")
    stage = ReviewStage(ReviewSettings(terms_dir=str(terms), terms_check_s=0))
    output = stage.analyse(video(shown=[(1, "線上賭博平台")], said=[(5, "欢迎光临")]))
    (hit,) = category(output, "terms")["evidence"]
    assert (hit["source"], hit["value"], hit["list"]) == ("text", "赌博", "gambling")
    assert output.data["term_lists"] == {"gambling": 1}

    (terms / "gambling.txt").write_text("赌博\n光临\n", encoding="utf-8")
    again = stage.analyse(video(shown=[(1, "線上賭博平台")], said=[(5, "欢迎光临")]))
    assert {e["value"] for e in category(again, "terms")["evidence"]} == {"赌博", "光临"}


def test_done_and_review_messages_carry_the_decision_not_the_evidence() -> None:
    result = video(shown=[(4, "电话 13812345678")])
    output = ReviewStage(ReviewSettings()).analyse(result)
    result = VideoResult(
        result.ref,
        result.pipeline_version,
        result.probe,
        result.frames,
        result.completed_at,
        speech=result.speech,
        outputs={REVIEW: output},
    )
    done = done_message_data(result)["review"]
    assert done["decision"] == output.data["decision"] != "pass"
    assert set(done["categories"]["contact"]) == {"score", "decision", "findings"}
    flagged = review_message_data(result)
    assert flagged is not None
    assert flagged["decision"] == done["decision"]
    assert flagged["result"]["api"] == "/v1/videos/clip/result"
    clean = video()
    passed = ReviewStage(ReviewSettings()).analyse(clean)
    clean_result = VideoResult(
        clean.ref, "v1", clean.probe, clean.frames, clean.completed_at, outputs={REVIEW: passed}
    )
    assert review_message_data(clean_result) is None
    assert done_message_data(clean_result)["review"]["decision"] == "pass"
