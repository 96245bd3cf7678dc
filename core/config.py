"""Configuration: one frozen settings model per subsystem, environment prefix ``REELSENSE_``.

Every subsystem reads its own model (``REELSENSE_KAFKA_BOOTSTRAP=...`` sets
``KafkaSettings.bootstrap``). A YAML file may override any value; see ``ServiceConfig.load``.
Secrets are ``SecretStr`` and never appear in logs or reprs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.description import DESCRIPTION_PROMPT
from core.errors import PermanentError
from core.records import BULK_LANE
from core.stage_names import DECODE, FETCH, FUSABLE

log = logging.getLogger(__name__)


def _settings(prefix: str) -> SettingsConfigDict:
    return SettingsConfigDict(env_prefix=f"REELSENSE_{prefix}", frozen=True, extra="forbid")


class KafkaSettings(BaseSettings):
    model_config = _settings("KAFKA_")

    bootstrap: str = "127.0.0.1:9092"
    topic: str = "videos.uploaded"
    # The bulk lane (consumers/lanes.py): backfills and reprocessing, taken only while fresh
    # uploads leave room, up to this share of max_in_flight. None: no bulk lane.
    bulk_topic: str | None = "videos.bulk"
    bulk_share: float = Field(default=0.67, gt=0, le=1)
    dead_letter_topic: str = "videos.uploaded.dlq"
    status_topic: str = "videos.status"
    group_id: str = "reelsense"
    max_in_flight: int = Field(default=8, ge=1)  # videos processed at once by one consumer
    max_event_bytes: int = Field(default=64 * 1024, ge=1024)
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    commit_interval_s: float = 1.0
    client_id: str = "reelsense"
    poll_timeout_ms: int = Field(default=200, ge=1)  # how long one poll waits for records
    max_poll_records: int = Field(default=500, ge=1)
    request_timeout_ms: int = 30_000  # broker requests, dead-letter acks included
    commit_timeout_s: float = 10.0  # one commit (periodic, on revoke, on shutdown) at most
    shutdown_timeout_s: float = 30.0  # in-flight videos get this long to finish on stop
    retry_initial_s: float = Field(default=0.5, gt=0)  # first backoff after a handler failure
    retry_max_s: float = Field(default=30.0, gt=0)  # backoff cap (exponential, with jitter)
    # Topics the service creates at start when missing (existing ones are left as they are).
    # Partitions of ``topic`` bound the consumer replicas that work at once; -1: the broker's
    # ``num.partitions``. Replication -1: the broker's ``default.replication.factor``.
    topic_partitions: int = Field(default=3, ge=-1)
    bulk_topic_partitions: int = Field(default=3, ge=-1)
    status_topic_partitions: int = Field(default=3, ge=-1)
    dead_letter_topic_partitions: int = Field(default=1, ge=-1)
    replication_factor: int = Field(default=-1, ge=-1)

    @field_validator(
        "topic_partitions",
        "bulk_topic_partitions",
        "status_topic_partitions",
        "dead_letter_topic_partitions",
        "replication_factor",
    )
    @classmethod
    def _positive_or_broker_default(cls, value: int) -> int:
        if value == 0:
            raise ValueError("0 is not a count: a positive number, or -1 for the broker's default")
        return value


class RedisSettings(BaseSettings):
    model_config = _settings("REDIS_")

    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "rs"
    password: SecretStr | None = None
    connect_timeout_s: float = Field(default=2.0, gt=0)
    socket_timeout_s: float = Field(default=5.0, gt=0)  # a blocking outbox read stays below it
    outbox_group: str = "notifier"  # the consumer group that delivers outbox entries
    progress_stream_maxlen: int = Field(default=10_000, ge=100)  # approximate cap (MAXLEN ~)
    aof_wait_timeout_ms: int = Field(default=1_000, ge=0)  # WAITAOF after final transitions
    # Refuse to start on a Redis that cannot confirm a final transition is on disk before its
    # offset is committed (checkpoint/durability.py); false accepts losing about a second.
    require_durable: bool = True
    # How long the record of a done or failed video is kept; None: for ever. The videos table
    # stays the durable truth: a replay of an expired video is still skipped from it.
    finished_retention_s: float | None = Field(default=None, gt=0)


class StorageSettings(BaseSettings):
    """Where results live: Lance tables and the object store (local folders or S3)."""

    model_config = _settings("STORAGE_")

    lance_uri: str = ".reelsense/lance"  # a folder or s3://bucket/prefix
    object_store_uri: str = ".reelsense/objects"  # a folder or s3://bucket/prefix
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: SecretStr | None = None
    s3_secret_access_key: SecretStr | None = None
    writer_batch_videos: int = Field(default=16, ge=1)  # videos per Lance commit at most
    # How long a finished video waits for others to share its commit. 0: committed as soon as
    # the writer is free; videos that finish during a commit go together in the next one, so
    # batches grow with the load and a video alone waits for nothing.
    writer_flush_s: float = Field(default=0.0, ge=0)
    s3_connect_timeout_s: float = Field(default=5.0, gt=0)
    s3_max_attempts: int = Field(default=3, ge=1)  # per request, before SinkUnavailable
    commit_retries: int = Field(default=5, ge=0)  # Lance commit conflicts retried per write
    vector_index_min_rows: int = Field(default=10_000, ge=1)  # exact search below, ANN above
    lance_compact_every: int = Field(default=64, ge=0)  # commits between compactions; 0: never
    # Versions older than this are removed at each compaction: every read opens the latest,
    # so this only needs to outlast the longest read (an hour kept ~10x the live data on disk:
    # bench.lance_upkeep).
    lance_keep_versions_s: float = Field(default=600.0, ge=0)
    # One writer per Lance root, enforced by a Redis lease with a fencing token, checked before
    # every commit (sinks/writer_lease.py). Off only where nothing else can write the tables.
    writer_lease: bool = True
    # How long the lease outlives its holder's last renewal (renewed every third of it); a
    # writer without it waits this long for it at most, then its batch is retried.
    writer_lease_s: float = Field(default=15.0, gt=0)


class LimitSettings(BaseSettings):
    """What an input may be. Anything beyond fails the video with a clear reason."""

    model_config = _settings("LIMITS_")

    file_roots: tuple[str, ...] = ()  # file:// URIs are allowed only below these folders
    max_bytes: int = 2 * 1024**3
    max_duration_s: float = 4 * 3600.0
    max_width: int = 7680
    max_height: int = 4320
    max_fps: float = 240.0
    max_streams: int = 16
    max_frames: int = 20_000  # sampled frames per video
    # Frames decoded per video (every frame, sampled or not); None: max_duration_s x max_fps.
    max_decoded_frames: int | None = Field(default=None, ge=1)
    max_decode_s: float = Field(default=3600.0, gt=0)  # decoding time per video and attempt
    containers: tuple[str, ...] = ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "avi", "mpegts")
    codecs: tuple[str, ...] = ("h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "mjpeg")
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    total_timeout_s: float = 600.0
    # http(s) sources: private, loopback and link-local addresses are refused unless this is
    # set (tests and the local demo serve videos from 127.0.0.1).
    allow_private: bool = False
    max_redirects: int = Field(default=5, ge=0)
    # s3:// sources a tenant may name, as "bucket/prefix" (the service's own credentials read
    # them); the key "*" applies to every tenant. Empty: no s3:// source is fetched.
    s3_sources: dict[str, tuple[str, ...]] = {}


class StageSettings(BaseSettings):
    """Parameters of the stages; all of them feed the pipeline version."""

    model_config = _settings("STAGES_")

    # fps: one sample per 1/sample_fps s; shots: that, plus one at the start of every shot;
    # keyframes: every key frame (cheapest: the rest is not decoded).
    sample_mode: Literal["fps", "shots", "keyframes"] = "fps"
    sample_fps: float = Field(default=1.0, gt=0)
    # Decode only the frames other frames refer to (FFmpeg ``skip_frame=NONREF``; fps and
    # shots modes): H.264 with B-frames decodes about 45% fewer pixels. A sample is then the
    # first reference frame of its slot (a few frame intervals late at most), and shots are
    # found on those frames.
    skip_nonref_frames: bool = False
    # Shot boundaries from every decoded frame (``stages.shots``); always on for "shots".
    shot_detection: bool = True
    shot_cut_change: float = Field(default=20.0, gt=0)  # 0-255, see stages.shots
    shot_gradual_change: float = Field(default=12.0, gt=0)
    shot_min_s: float = Field(default=0.4, ge=0)  # boundaries closer than this are dropped
    # A sample whose picture repeats an earlier one of its chunk and shot (no cell of the
    # signature grid differs by more than this many levels) is not analysed: it takes that
    # sample's findings and says so (``repeat_of``). 0 analyses every sample.
    repeat_max_change: float = Field(default=8.0, ge=0)
    thumbnail_side: int = Field(default=320, ge=0)  # shot thumbnails' long side; 0: none
    chunk_frames: int = Field(default=8, ge=1)  # sampled frames per chunk at most
    # What one chunk may cost to decode, in megapixels decoded (width x height x frames decoded
    # per sample): a chunk holds as many samples as fit, 1 to ``chunk_frames``, so a chunk of a
    # 4K or 60 fps video costs about what one of 720p at 30 fps does. 240 keeps 8 samples per
    # chunk at 720p 30 fps sampled once a second, 3 at 1080p, 1 at 4K 60 fps. None: always
    # ``chunk_frames``.
    chunk_decode_mpix: float | None = Field(default=240.0, gt=0)
    max_side: int = Field(default=1280, ge=64)  # frames are downscaled so the long side fits
    # FFmpeg threads per decoder. 1 spends the least CPU per frame, right when several videos
    # decode at once; more shortens one video's decode on an idle machine; 0: one per core, 4
    # at most. Speed only: not part of the pipeline version.
    decode_threads: int = Field(default=1, ge=0)
    ocr_det_limit_side: int = 640
    ocr_min_score: float = 0.5
    ocr_threads: int = 1
    # use-multilingual-v3 (16 languages, numpy) or multilingual-e5-small (about 100, a C
    # engine), both bundled; all-MiniLM-L6-v2 (English; the ``st`` extra) or a
    # sentence-transformers model folder. See the README's search figures.
    embed_model: str = "use-multilingual-v3"
    embed_threads: int = 1
    vlm_model: str | None = None  # off unless configured: a path or model id
    vlm_engine: Literal["transformers", "vllm"] = "transformers"
    # description: an answer in the JSON schema of ``core.description``, by constrained
    # decoding; caption: one sentence of free text.
    vlm_output: Literal["description", "caption"] = "description"
    # shots: the first sample of each shot (every sample when shot detection is off);
    # samples: every sample analysed.
    vlm_scope: Literal["shots", "samples"] = "shots"
    vlm_prompt: str = "Describe this video frame in one sentence."  # captions
    vlm_description_prompt: str = DESCRIPTION_PROMPT
    vlm_max_new_tokens: int = 32  # captions
    # Enough for any answer a real model gives (tens of tokens); one cut short is recorded
    # as no description.
    vlm_description_max_tokens: int = Field(default=512, ge=64)
    # Pixels per frame the VLM sees (Qwen2-VL resizes to fit); None keeps the model's default.
    vlm_max_pixels: int | None = Field(default=None, ge=28 * 28 * 4)
    vlm_batch_size: int = Field(default=8, ge=1)  # frames per generate call (transformers engine)
    vlm_threads: int = Field(default=1, ge=1)  # torch CPU threads (transformers engine)
    # A CLIP or SigLIP folder (transformers ``save_pretrained``): a vector per analysed frame
    # from its pixels, so frames without text are found by a text query. Off unless set.
    image_embed_model: str | None = None
    image_embed_batch_size: int = Field(default=16, ge=1)  # frames per forward pass
    image_embed_threads: int = Field(default=1, ge=1)  # torch CPU threads


class AsrSettings(BaseSettings):
    """Speech recognition on the audio track (``REELSENSE_ASR_*``); all but ``cpu_threads``
    feed the pipeline version."""

    model_config = _settings("ASR_")

    enabled: bool = True  # a video without an audio track costs nothing: no model is loaded
    model_path: str | None = None  # a local CTranslate2 Whisper folder; None: bundled tiny.en
    # ISO 639-1 code the model decodes with; None detects it per window (multilingual models).
    language: str | None = None
    cpu_threads: int = Field(default=1, ge=1)  # CTranslate2 threads; size to the replica's CPUs
    vad_filter: bool = True  # decode only what Silero VAD hears as speech
    word_timestamps: bool = True  # word start/end times: measured ~5-10% more CPU per window
    # Audio per call, and per checkpoint: Whisper sees 30 s at most.
    window_s: float = Field(default=30.0, gt=0, le=30.0)


class PoolSettings(BaseModel):
    """Resources and replicas of one stage pool on Ray. A resource left unset is what the
    stage declares (``Stage.resources``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_cpus: float | None = None
    num_gpus: float | None = None
    memory_mb: int | None = None
    min_replicas: int = 1
    max_replicas: int = 1
    max_batch_size: int = 4
    batch_wait_timeout_s: float = 0.02
    # Run the stage inside the decode replicas, on each chunk as it is decoded, instead of in a
    # pool of its own (as Ray Data fuses operators): no request per chunk, and pixels no longer
    # cross the object store once every image stage is fused. For CPU stages on a machine where
    # every stage competes for the same cores; size the decode pool for the fused work.
    fuse: bool = False


class RaySettings(BaseSettings):
    model_config = _settings("RAY_")

    address: str | None = None  # None starts a local Ray
    namespace: str = "reelsense"
    num_cpus: int | None = None  # for a local Ray only
    # How the pools are laid out where a pool's own settings are left unset
    # (``runtime.placement``): "auto" is per_core on a local Ray, pools on a cluster.
    placement: Literal["auto", "per_core", "pools"] = "auto"
    # A video alone is split into time ranges of at least this much, decoded by idle ingest
    # replicas at once (``runtime.pools.split``); 0: never split.
    split_min_s: float = Field(default=30.0, ge=0)
    # One pool per stage (``core.stage_names``); the ingest replicas take the decode pool's.
    fetch: PoolSettings = PoolSettings()
    decode: PoolSettings = PoolSettings()
    ocr: PoolSettings = PoolSettings()
    vlm: PoolSettings = PoolSettings()
    image_embed: PoolSettings = PoolSettings()
    embed: PoolSettings = PoolSettings()

    @model_validator(mode="after")
    def _fusable(self) -> RaySettings:
        for name in (FETCH, DECODE):
            if getattr(self, name).fuse:
                raise ValueError(f"ray.{name}.fuse: only {', '.join(FUSABLE)} fuse into decode")
        for name in FUSABLE:
            pool: PoolSettings = getattr(self, name)
            if pool.fuse and pool.num_gpus:
                raise ValueError(f"ray.{name}: a stage with GPUs runs in a pool of its own")
        return self

    @property
    def fused(self) -> frozenset[str]:
        """The stages that run inside the decode replicas."""
        return frozenset(name for name in FUSABLE if getattr(self, name).fuse)


class RuntimeSettings(BaseSettings):
    """How videos are orchestrated."""

    model_config = _settings("RUNTIME_")

    executor: Literal["ray", "local"] = "ray"  # "local": stages in this process (tests)
    workdir: str = ".reelsense/work"  # downloads and scratch files
    max_attempts: int = Field(default=3, ge=1)  # per video, for retryable failures
    retry_backoff_s: tuple[float, ...] = (1.0, 5.0, 30.0)
    # Failures of the service's own dependencies (Redis, the object store, the tables, the
    # broker) use up no attempt: a video is retried through an outage this long, then fails.
    outage_window_s: float = Field(default=600.0, ge=0)
    # An attempt's lease on its video (runtime/lease.py), renewed every third of it: another
    # instance takes a running video over only once its owner let it go or stopped renewing.
    lease_s: float = Field(default=20.0, gt=0)
    # This process's name on the leases; one kept over restarts (a pod name) takes its own
    # videos back at once after a crash. None: a name of its own per process.
    instance_id: str | None = None
    chunks_in_flight_per_video: int = Field(default=4, ge=1)
    chunks_in_flight: int = Field(default=16, ge=1)  # across all videos of this process
    drain_timeout_s: float = 30.0  # on SIGTERM, how long in-flight videos may still finish
    # Persist each chunk's outputs and record it done, so a restart resumes a video at its
    # first unfinished chunk. Off (for measuring what they cost): a restart redoes the video.
    chunk_checkpoints: bool = True
    # Make each analysed chunk and window of speech searchable at once, marked partial until
    # its video is done (runtime/partials.py). Off: a video is found once it is done.
    partial_results: bool = True
    # A video's parts wait this long for company and go to the index together: a video done
    # sooner writes none, a long one one commit per period (0: each part at once).
    partial_results_every_s: float = Field(default=5.0, ge=0)
    # Chunks a video's decoder may run ahead of those the orchestration has taken: bounds the
    # pixels waiting in the object store whatever the length of the video.
    decode_ahead_chunks: int = Field(default=2, ge=1)
    # Videos decoding at once in this process (0: as many as are in flight). A video gives its
    # slot up with its last chunk, so the next one decodes while its last chunks are analysed.
    videos_decoding: int = Field(default=0, ge=0)
    metrics_port: int | None = None  # Prometheus endpoint of this process; None: off, 0: any
    metrics_host: str = "127.0.0.1"
    metrics_interval_s: float = Field(default=2.0, gt=0)  # replica activity and lag reads


class WebhookSubscription(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    tenant: str | None = None  # None: every tenant
    events: tuple[str, ...] = ("video.done", "video.failed")


class NotifySettings(BaseSettings):
    model_config = _settings("NOTIFY_")

    # Stable across restarts (a pod or host name) so a restarted notifier resumes its own
    # unacknowledged deliveries at once; None: this host's name.
    consumer_name: str | None = None

    # Standard Webhooks secrets ("whsec_" + base64). Several sign at once during a rotation.
    webhook_secrets: tuple[SecretStr, ...] = ()
    # Without a secret webhooks go out unsigned: ``reelsense serve`` refuses that unless this
    # says it is meant (a receiver that checks nothing, on a private network).
    allow_unsigned: bool = False
    subscriptions: tuple[WebhookSubscription, ...] = ()
    timeout_s: float = 15.0
    # Seconds to wait before each retry; the Standard Webhooks schedule.
    retry_schedule_s: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
    jitter: float = 0.1
    # Outbox, status topic and delivery log failures: exponential backoff, with jitter.
    store_retry_initial_s: float = Field(default=0.5, gt=0)
    store_retry_max_s: float = Field(default=30.0, gt=0)
    allow_private_targets: bool = False  # tests and the local demo deliver to 127.0.0.1
    # A Retry-After beyond this is capped, so one endpoint cannot park a message for ever.
    max_retry_after_s: float = Field(default=36000.0, gt=0)
    # An endpoint is disabled once every delivery to it has failed for this long, or after this
    # many failures in a row (None: that rule is off). A success resets both.
    disable_after_s: float | None = 5 * 86400.0
    disable_after_failures: int | None = None
    max_concurrency: int = Field(default=16, ge=1)  # HTTP requests in flight at once
    max_pending_events: int = Field(default=1000, ge=1)  # outbox entries held unacked at once
    read_count: int = Field(default=16, ge=1)  # outbox entries per read
    read_block_ms: int = Field(default=1000, ge=1)
    # Entries another notifier took and left unacked this long are taken over (it is gone or
    # hangs). A live notifier renews its hold on the entries it works on every
    # reclaim_interval_s, so they never sit idle this long; one that stalled past it finds its
    # entries taken over and stops working on them, so each attempt is sent once.
    reclaim_after_s: float = Field(default=60.0, gt=0)
    reclaim_interval_s: float = Field(default=15.0, gt=0)
    drain_timeout_s: float = Field(default=10.0, ge=0)  # on stop, for attempts under way
    log_max_attempts: int = Field(default=100, ge=1)  # delivery attempts kept per message
    log_retention_s: float = Field(default=30 * 86400.0, gt=0)
    user_agent: str = "reelsense-webhooks/0.1"

    @model_validator(mode="after")
    def _holds_renewed_in_time(self) -> NotifySettings:
        if self.reclaim_interval_s >= self.reclaim_after_s:
            raise ValueError(
                "notify.reclaim_interval_s must be below notify.reclaim_after_s: holds on "
                "entries in hand are renewed that often, or live notifiers lose them"
            )
        return self


class ApiSettings(BaseSettings):
    model_config = _settings("API_")

    host: str = "127.0.0.1"
    port: int = 8765
    # tenant -> its bearer tokens (several while one is rotated); empty: no auth, which
    # ``reelsense serve`` refuses unless ``allow_anonymous`` says it is meant (local use).
    # Keyed by tenant so that the tokens themselves are only ever SecretStr values.
    tenant_tokens: dict[str, tuple[SecretStr, ...]] = {}
    allow_anonymous: bool = False
    heartbeat_s: float = Field(default=15.0, gt=0)  # comment line on an idle event stream
    health_timeout_s: float = Field(default=2.0, gt=0)  # /healthz waits this long for Redis
    max_page: int = Field(default=500, ge=1)  # largest `limit` a list accepts
    # Event streams one API process keeps open at once, and of them one tenant's (429 beyond).
    max_streams: int = Field(default=1000, ge=1)
    max_streams_per_tenant: int = Field(default=100, ge=1)
    replays_per_minute: int = Field(default=60, ge=1)  # dead-letter replays of one tenant
    replicas: int = Field(default=1, ge=1)  # Ray Serve replicas of the API deployment
    replica_cpus: float = Field(default=0.25, gt=0)
    # Serve the API from the service's own process rather than as Serve replicas behind Serve's
    # proxy; None: when Ray is local (``ray.address`` unset), where it saves two processes.
    in_service_process: bool | None = None

    def bearer_tokens(self) -> dict[str, str]:
        """bearer token -> tenant, as ``api.app.create_app`` takes it."""
        mapping: dict[str, str] = {}
        for tenant, secrets in self.tenant_tokens.items():
            for secret in secrets:
                token = secret.get_secret_value()
                if mapping.setdefault(token, tenant) != tenant:
                    raise ValueError("one API token is configured for two tenants")
        return mapping


class BackfillSettings(BaseSettings):
    """``reelsense backfill`` on Ray Data (``backfill.runner``)."""

    model_config = _settings("BACKFILL_")

    # Whether a backfilled video's final transition sends its webhooks and status message.
    notify: bool = False
    workers: int | None = Field(default=None, ge=1)  # actors; None: as many as the cluster holds
    worker_cpus: float = Field(default=1.0, gt=0)  # CPUs each actor reserves
    # GPUs each actor reserves: the actor runs every stage, the VLM included when one is set.
    worker_gpus: float = Field(default=0.0, ge=0)

    @property
    def quiet_lanes(self) -> frozenset[str]:
        """The lanes whose videos notify nobody: bulk work, unless ``notify``."""
        return frozenset() if self.notify else frozenset({BULK_LANE})


class InsecureConfig(PermanentError):
    """A setting leaves the service open and no other setting says that is meant."""

    def __init__(self, message: str) -> None:
        super().__init__(f"refusing to start: {message}", code="insecure_config")


class ServiceConfig(BaseModel):
    """All settings of one service process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    stages: StageSettings = Field(default_factory=StageSettings)
    asr: AsrSettings = Field(default_factory=AsrSettings)
    ray: RaySettings = Field(default_factory=RaySettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    backfill: BackfillSettings = Field(default_factory=BackfillSettings)

    def left_open(self) -> list[tuple[str, bool]]:
        """What this configuration leaves unprotected, each with whether a setting says it is
        meant: an API without tenant tokens answers anyone; webhooks without a secret go out
        unsigned."""
        found = []
        if not self.api.tenant_tokens:
            found.append(
                (
                    "api.tenant_tokens is empty: the API answers anyone "
                    "(set tokens, or api.allow_anonymous for local use)",
                    self.api.allow_anonymous,
                )
            )
        if not self.notify.webhook_secrets:
            found.append(
                (
                    "notify.webhook_secrets is empty: webhooks go out unsigned "
                    "(set a whsec_ secret, or notify.allow_unsigned)",
                    self.notify.allow_unsigned,
                )
            )
        return found

    def refuse_left_open(self) -> None:
        """Raise ``InsecureConfig`` naming what is left open without a setting that says it is
        meant; log what is meant (WARNING). A service that serves the API or sends webhooks
        calls this before it starts."""
        refused = []
        for what, meant in self.left_open():
            if meant:
                log.warning("insecure by choice: %s", what)
            else:
                refused.append(what)
        if refused:
            raise InsecureConfig("; ".join(refused))

    def to_replica_json(self) -> str:
        """This config as JSON for a Ray replica to rebuild, secrets included.

        ``model_dump_json`` masks every ``SecretStr`` as ``**********``; a replica built from
        that would hold a bearer token anyone can send, webhook secrets that do not decode and
        S3 keys that do not sign. The JSON travels only inside the Ray cluster; never log it.
        """

        def reveal(value: object) -> object:
            if isinstance(value, SecretStr):
                return value.get_secret_value()
            raise TypeError(f"{type(value).__name__} is not JSON serializable")

        return json.dumps(self.model_dump(mode="python"), default=reveal)

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> ServiceConfig:
        """Environment first, then the YAML file at ``path``, then ``overrides`` (per section)."""
        sections: dict[str, Any] = {}
        if path is not None:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
            if not isinstance(loaded, dict):
                raise ValueError(f"{path}: expected a mapping of sections")
            sections.update(loaded)
        for name, values in overrides.items():
            sections[name] = {**sections.get(name, {}), **values}
        built: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            settings_cls = field.annotation
            assert isinstance(settings_cls, type)
            built[name] = settings_cls(**sections.pop(name, {}))
        if sections:
            raise ValueError(f"unknown configuration sections: {sorted(sections)}")
        return cls(**built)
