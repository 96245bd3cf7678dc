"""What the configuration reference (``scripts/docs_reference.py``) says that the settings'
sources do not: the descriptions of fields without a comment of their own, and the page's
introduction."""

from __future__ import annotations

from typing import Any

# Fields with neither a ``description`` nor a comment of their own in the source: what each
# is, said here once. An entry that a field's own description or comment has made redundant
# fails the test, so this list only shrinks as the sources say more.
UNCOMMENTED: dict[str, str] = {
    "kafka.bootstrap": "Kafka bootstrap servers, `host:port` (several separated by commas).",
    "kafka.topic": "The upload topic: one event per video, keyed by its video id.",
    "kafka.bulk_share": "The share of `max_in_flight` the bulk lane may fill at most, and "
    "only while no fresh upload waits (see `bulk_topic`).",
    "kafka.dead_letter_topic": "Where invalid upload events go, with headers that say where "
    "they came from and why (`reelsense dead-letters` lists and replays them).",
    "kafka.status_topic": "Where the service publishes each video's `video.done`, "
    "`video.failed` and `video.deleted` messages (the webhooks' payloads) and a tenant's "
    "`endpoint.disabled`.",
    "kafka.group_id": "The consumer group: the service processes in it share the topics' "
    "partitions.",
    "kafka.max_event_bytes": "The largest upload event accepted; a larger one is "
    "dead-lettered (`event_too_large`).",
    "kafka.session_timeout_ms": "The consumer's session timeout (aiokafka): a member silent "
    "this long is expelled from the group.",
    "kafka.heartbeat_interval_ms": "How often the consumer heartbeats the group coordinator "
    "(aiokafka).",
    "kafka.max_poll_interval_ms": "The longest time between two polls before the member is "
    "considered failed (aiokafka).",
    "kafka.commit_interval_s": "How often the offsets below which every record is done are "
    "committed (they are committed on a rebalance and on shutdown too).",
    "kafka.client_id": "The Kafka client id; the producers of dead letters and status events "
    "append a suffix of their own.",
    "kafka.max_poll_records": "Records one poll returns at most (aiokafka).",
    "kafka.bulk_topic_partitions": "Partitions of `bulk_topic` when the service creates it "
    "(see `topic_partitions`).",
    "kafka.status_topic_partitions": "Partitions of `status_topic` when the service creates "
    "it (see `topic_partitions`).",
    "kafka.dead_letter_topic_partitions": "Partitions of `dead_letter_topic` when the service "
    "creates it (see `topic_partitions`).",
    "kafka.replication_factor": "Replication of the topics the service creates; -1: the "
    "broker's `default.replication.factor` (see `topic_partitions`).",
    "redis.url": "The Redis URL, with its database number; under Sentinel (`sentinels`) only "
    "the database number is read from it.",
    "redis.key_prefix": "The prefix of every key the service writes. Under Redis Cluster a "
    "hash tag such as `{rs}` keeps every key in one slot.",
    "redis.password": "The password of Redis (its primary and replicas).",
    "redis.sentinel_master": "The name of the primary the Sentinels watch (see `sentinels`).",
    "redis.sentinel_password": "The password of the Sentinels themselves, where they have one.",
    "redis.connect_timeout_s": "Connect timeout of a Redis or Sentinel connection.",
    "storage.s3_endpoint_url": "An S3-compatible endpoint (MinIO and the like); None: AWS. "
    "It is the operator's, so the outbound guard lets a private address through.",
    "storage.s3_region": "The S3 region.",
    "storage.s3_access_key_id": "The S3 access key id; None: the default AWS credential chain "
    "(workload identity, an instance role).",
    "storage.s3_secret_access_key": "The S3 secret access key; None: the default AWS "
    "credential chain.",
    "storage.s3_connect_timeout_s": "Connect timeout of an S3 request.",
    "limits.max_bytes": "The largest source file, in bytes (`limit_bytes`).",
    "limits.max_duration_s": "The longest video, in seconds (`limit_duration`): checked in the "
    "header and again on the presentation time of what is decoded.",
    "limits.max_width": "The widest frame, in pixels (`limit_dimensions`): checked in the "
    "header and on every decoded frame.",
    "limits.max_height": "The tallest frame, in pixels (`limit_dimensions`): checked in the "
    "header and on every decoded frame.",
    "limits.max_fps": "The highest frame rate (`limit_fps`); with `max_duration_s` it also "
    "bounds the frames decoded (see `max_decoded_frames`).",
    "limits.max_streams": "The most streams one container may hold (`limit_streams`).",
    "limits.decode_s_per_video_s": "Decoding time allowed per second of video decoded (see "
    "`decode_grace_s`).",
    "limits.max_decode_s": "The most decoding time one range of a video gets in one attempt, "
    "whatever its length (see `decode_grace_s`).",
    "limits.containers": "The containers accepted, as FFmpeg demuxer names (one entry per "
    "format family); any other fails with `unsupported_container`.",
    "limits.codecs": "The video codecs accepted; any other fails with `unsupported_codec`.",
    "limits.connect_timeout_s": "Connect timeout of a source download.",
    "limits.read_timeout_s": "The longest wait for a read of a source download.",
    "limits.total_timeout_s": "A download ends within this many seconds in all, however "
    "slowly the source sends (`fetch_timeout`).",
    "limits.max_redirects": "Redirects a source download follows; each target is checked by "
    "the outbound guard again.",
    "stages.sample_fps": "Samples per second of video (`fps` and `shots` modes).",
    "stages.shot_gradual_change": "How far, on the same 0-255 scale, a dissolve or fade must "
    "move the picture from where it began to count as a shot boundary (see `stages.shots`).",
    "ray.namespace": "The Ray namespace of the service's actors and Serve applications.",
    "ray.write_timeout_s": "The deadline of one write to the sink writer (see `call_timeout_s`).",
    "ray.decode": "The ingest replicas: fetching, probing and decoding, with speech "
    "recognition and every fused stage.",
    "ray.ocr": "The OCR pool.",
    "ray.labels": "The labels stage's pool (ImageNet labels per sample).",
    "ray.qr": "The QR stage's pool (the QR codes in each sample, for review).",
    "ray.fingerprint": "The fingerprint stage's pool (a perceptual hash of each sample, for "
    "re-uploads).",
    "ray.detect": "The detect stage's pool (faces and plug-in detectors in each sample, for "
    "review).",
    "ray.vlm": "The VLM pool (GPU workers on a cluster); a stage with GPUs cannot fuse.",
    "ray.image_embed": "The image embedder's pool.",
    "ray.embed": "The text embedder's pool.",
    "notify.subscriptions": "Webhook endpoints, each with the tenant and event types it takes "
    "(see the webhook subscription fields below). An upload event's own `callback_url` is "
    "a target too.",
    "notify.timeout_s": "One webhook request's timeout (`webhook_timeout`).",
    "notify.jitter": "Each wait of `retry_schedule_s` is spread by up to this fraction either way.",
    "notify.store_retry_max_s": "The longest wait between two tries of an outbox, status topic "
    "or delivery log call (see `store_retry_initial_s`).",
    "notify.disable_after_failures": "Failures in a row that disable an endpoint; None: that "
    "rule is off (see `disable_after_s`).",
    "notify.retry_poll_s": "How often every notifier looks for webhook retries that are due "
    "in the schedule.",
    "notify.read_block_ms": "How long one outbox read waits for a new entry.",
    "notify.reclaim_interval_s": "How often a notifier renews its hold on the outbox entries it "
    "works on; below `reclaim_after_s` (see there).",
    "notify.log_retention_s": "How long the delivery log keeps webhook dead letters and "
    "endpoint states; upkeep removes older ones.",
    "notify.user_agent": "The User-Agent of webhook requests.",
    "api.host": "The address the API listens on: the service's own process, or Serve's HTTP "
    "proxy on a cluster.",
    "api.port": "The port the API listens on.",
    "api.allow_anonymous": "Let `reelsense serve` start without `tenant_tokens`, with an API "
    "that answers anyone; a warning is logged at every start.",
    "api.max_streams_per_tenant": "Event streams of one tenant open at once (429 "
    "`too_many_streams` beyond; see `max_streams`).",
    "api.replica_cpus": "CPUs each API replica reserves (a Serve deployment on a cluster).",
    "runtime.retry_backoff_s": "Waits between a video's attempts; the last one repeats.",
    "runtime.sweep_after_s": "How long a record must have been left queued or running with no "
    "live owner before the sweeper sends it through again (see `sweep_every_s`).",
    "runtime.chunks_in_flight_per_video": "Chunks of one video in the stages at once.",
    "runtime.metrics_host": "The address of the metrics endpoint (`metrics_port`); `0.0.0.0` "
    "to be scraped from other machines.",
    "OcrSettings.det_limit_side": "The OCR detector's input size: a frame is scaled so that its "
    "long side is at most this many pixels.",
    "OcrSettings.min_score": "OCR lines read with a lower confidence are dropped.",
    "OcrSettings.threads": "onnxruntime threads of the OCR engine; size it to the CPUs a "
    "replica is granted. Speed only: not part of the pipeline version.",
    "EmbedSettings.threads": "Threads of the text embedder. Speed only: not part of the "
    "pipeline version.",
    "VlmSettings.engine": "`transformers` (CPU or GPU) or `vllm` (GPU workers, the `vllm` extra).",
    "VlmSettings.description_prompt": "The prompt that asks for a description in the JSON "
    "schema of `core.description` (by default `core.description.DESCRIPTION_PROMPT`).",
    "PoolSettings.num_cpus": "CPUs each replica reserves; None: what the stage declares.",
    "PoolSettings.num_gpus": "GPUs each replica reserves; None: what the stage declares.",
    "PoolSettings.memory_mb": "Memory (MiB) each replica reserves; None: what the stage "
    "declares (most declare none).",
    "PoolSettings.min_replicas": "The fewest replicas; below `max_replicas`, Serve autoscales "
    "between the two by requests in flight.",
    "PoolSettings.max_replicas": "The most replicas (see `min_replicas`).",
    "PoolSettings.max_batch_size": "Chunks a replica batches into one model call "
    "(`@serve.batch`), and the requests in flight per replica that autoscaling aims at.",
    "PoolSettings.batch_wait_timeout_s": "How long a replica waits to fill a batch.",
    "WebhookSubscription.url": "The endpoint, http or https; a private address is refused "
    "unless `notify.allow_private_targets`.",
    "WebhookSubscription.events": "The event types it is sent.",
}

CONFIGURATION_INTRO = """\
# Configuration reference

{generated}

Every subsystem has one frozen settings model (pydantic-settings), listed here section by
section. A setting comes, in this order of precedence, from:

1. the keyword overrides of `ServiceConfig.load` (what the CLI passes, such as
   `--s3-endpoint`);
2. the YAML file given with `--config` (one mapping per section, as in
   `deploy/config/production.yaml`): **a key in the file wins over the environment**;
3. the environment: `REELSENSE_<SECTION>_<FIELD>`, for example `REELSENSE_KAFKA_BOOTSTRAP`
   (names are matched without regard to case);
4. the default below.

`reelsense config show` prints the effective configuration with where each value came
from.

In the environment, lists, mappings and nested models are JSON:
`REELSENSE_LIMITS_FILE_ROOTS='["/data"]'`,
`REELSENSE_API_TENANT_TOKENS='{{"acme": ["..."]}}'`. A stage's pool (`ray.ocr`, ...) is
one variable holding a JSON object, `REELSENSE_RAY_OCR='{{"num_cpus": 1, "max_replicas":
8}}'`: the fields it leaves out keep their defaults, and where the YAML file sets the same
pool, the two are merged key by key, the file's keys winning. There is no variable per pool
field: pydantic-settings splits nested names only with an `env_nested_delimiter`, which these
models do not set, so a name such as `REELSENSE_RAY_OCR__NUM_CPUS` is ignored. An unknown key
in the YAML file is refused (`extra="forbid"`); an unknown `REELSENSE_*` variable is ignored.

The defaults below are the models'. Where `ray.placement` resolves to `per_core` (a
local Ray), the profile fills in the pools, `kafka.max_in_flight` and
`runtime.videos_decoding` that no source set (see
[Concepts](../concepts.md#placement)); a value you set is kept as you wrote it.

Secrets are `SecretStr`: never logged, and shown here without a default. Settings that
change what the stages compute feed the pipeline version (see
[Concepts](../concepts.md#pipeline-versions)); a change to them makes finished videos
eligible for recomputation.
"""


#: What the sections that were flat fields of ``stages`` until this release say of the old
#: names (``core.settings_renames``).
_RENAMED = (
    "Deprecated: the flat names of earlier releases (`stages.<section>_<field>`, as "
    "`stages.ocr_min_score`, and their variables, as `REELSENSE_STAGES_OCR_MIN_SCORE`) are "
    "still read in this release, each with a warning; a value given under both names is an "
    "error."
)

#: The titles of the pages' sections for the settings models that are fields of a section.
SECTION_TITLES = {
    "OcrSettings": "OCR fields",
    "EmbedSettings": "Text embedding fields",
    "VlmSettings": "VLM fields",
    "ImageEmbedSettings": "Image embedding fields",
    "LabelSettings": "Label fields",
    "ChapterSettings": "Chapter fields",
    "SummarySettings": "Summary fields",
    "ReviewSettings": "Review fields",
    "Thresholds": "Review threshold fields",
    "DuplicateSettings": "Re-upload fields",
}


def nested_models() -> list[tuple[type[Any], str, str]]:
    """The settings models that are not sections of their own: each with its page section's
    title and where it is used."""
    from core.config import (
        ChapterSettings,
        DuplicateSettings,
        EmbedSettings,
        ImageEmbedSettings,
        LabelSettings,
        OcrSettings,
        PoolSettings,
        ReviewSettings,
        SummarySettings,
        VlmSettings,
        WebhookSubscription,
    )
    from core.review_settings import Thresholds

    return [
        (
            PoolSettings,
            "Stage pool fields",
            "Each of `ray.fetch`, `ray.decode`, `ray.ocr`, `ray.labels`, `ray.qr`, "
            "`ray.fingerprint`, `ray.detect`, `ray.vlm`, "
            "`ray.image_embed` and `ray.embed` holds these fields; in the environment the "
            "whole pool is one JSON object (`REELSENSE_RAY_OCR='{\"num_cpus\": 1}'`). "
            "`ray.fetch` is not read: fetching runs in the ingest replicas, which take "
            "`ray.decode`'s.",
        ),
        (
            OcrSettings,
            SECTION_TITLES["OcrSettings"],
            "`stages.ocr` holds these fields; in the environment the section is one JSON object "
            "(`REELSENSE_STAGES_OCR='{\"min_score\": 0.7}'`). " + _RENAMED,
        ),
        (
            EmbedSettings,
            SECTION_TITLES["EmbedSettings"],
            "`stages.embed` holds these fields; in the environment the section is one JSON "
            'object (`REELSENSE_STAGES_EMBED=\'{"model": "multilingual-e5-small"}\'`). ' + _RENAMED,
        ),
        (
            VlmSettings,
            SECTION_TITLES["VlmSettings"],
            "`stages.vlm` holds these fields; in the environment the section is one JSON object "
            '(`REELSENSE_STAGES_VLM=\'{"model": "/models/qwen2-vl"}\'`). ' + _RENAMED,
        ),
        (
            ImageEmbedSettings,
            SECTION_TITLES["ImageEmbedSettings"],
            "`stages.image_embed` holds these fields; in the environment the section is one "
            'JSON object (`REELSENSE_STAGES_IMAGE_EMBED=\'{"model": "/models/clip"}\'`). '
            + _RENAMED,
        ),
        (
            LabelSettings,
            SECTION_TITLES["LabelSettings"],
            "`stages.labels` holds these fields; in the environment the section is one JSON "
            "object (`REELSENSE_STAGES_LABELS='{\"enabled\": false}'`).",
        ),
        (
            ChapterSettings,
            SECTION_TITLES["ChapterSettings"],
            "`stages.chapters` holds these fields; in the environment the section is one JSON "
            "object (`REELSENSE_STAGES_CHAPTERS='{\"min_chapter_s\": 60}'`).",
        ),
        (
            SummarySettings,
            SECTION_TITLES["SummarySettings"],
            "`stages.summary` holds these fields; in the environment the section is one JSON "
            "object (`REELSENSE_STAGES_SUMMARY='{\"enabled\": true}'`).",
        ),
        (
            ReviewSettings,
            SECTION_TITLES["ReviewSettings"],
            "`stages.review` holds these fields; in the environment the section is one JSON "
            'object (`REELSENSE_STAGES_REVIEW=\'{"terms_dir": "/etc/reelsense/terms"}\'`).',
        ),
        (
            Thresholds,
            SECTION_TITLES["Thresholds"],
            "Each category of `stages.review.thresholds` (`contact`, `qr`, `terms`, `visual`), "
            "and of each tenant's in `stages.review.tenant_thresholds`, holds these fields.",
        ),
        (
            DuplicateSettings,
            SECTION_TITLES["DuplicateSettings"],
            "`stages.duplicates` holds these fields; in the environment the section is one "
            "JSON object (`REELSENSE_STAGES_DUPLICATES='{\"across_tenants\": true}'`).",
        ),
        (
            WebhookSubscription,
            "Webhook subscription fields",
            "Each entry of `notify.subscriptions` holds these fields; in the environment the "
            'list is JSON (`REELSENSE_NOTIFY_SUBSCRIPTIONS=\'[{"url": "https://..."}]\'`).',
        ),
    ]
