"""Configuration: one frozen settings model per subsystem, environment prefix ``REELSENSE_``.

Every subsystem reads its own model (``REELSENSE_KAFKA_BOOTSTRAP=...`` sets
``KafkaSettings.bootstrap``). A YAML file may override any value; see ``ServiceConfig.load``.
Secrets are ``SecretStr`` and never appear in logs or reprs. The pipeline's sections (limits,
stages, ASR, Ray pools, runtime) live in ``core.pipeline_settings``, the API's (with its token
checks and ``InsecureConfig``) in ``core.api_settings``; this module re-exports them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings

from core.api_settings import ApiSettings, InsecureConfig
from core.config_sources import FILE, OVERRIDE, sources_of
from core.frame_stage_settings import EmbedSettings, ImageEmbedSettings, OcrSettings, VlmSettings
from core.pipeline_settings import (
    AsrSettings,
    LimitSettings,
    PoolSettings,
    RaySettings,
    RuntimeSettings,
    StageSettings,
)
from core.records import BULK_LANE
from core.review_settings import ReviewSettings
from core.settings_base import settings_config
from core.settings_renames import current_names
from core.video_stage_settings import (
    ChapterSettings,
    DuplicateSettings,
    LabelSettings,
    SummarySettings,
)

__all__ = [
    "ApiSettings",
    "AsrSettings",
    "BackfillSettings",
    "ChapterSettings",
    "DuplicateSettings",
    "EmbedSettings",
    "ImageEmbedSettings",
    "InsecureConfig",
    "KafkaSettings",
    "LabelSettings",
    "LimitSettings",
    "NotifySettings",
    "OcrSettings",
    "PoolSettings",
    "RaySettings",
    "RedisSettings",
    "ReviewSettings",
    "RuntimeSettings",
    "ServiceConfig",
    "StageSettings",
    "StorageSettings",
    "SummarySettings",
    "VlmSettings",
    "WebhookSubscription",
]

log = logging.getLogger(__name__)


class KafkaSettings(BaseSettings):
    model_config = settings_config("KAFKA_")

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
    # How long the broker may hold a fetch that finds no new record: an upload that arrives
    # meanwhile may wait that long to be seen (aiokafka's default is 500).
    fetch_max_wait_ms: int = Field(default=100, ge=0)
    request_timeout_ms: int = 30_000  # broker requests, dead-letter acks included
    # The largest dead letter this service produces: the broker's
    # ``message.max.bytes`` (Kafka's default is about 1 MiB) or below, so a dead letter too
    # large for the broker is known as such and sent in a smaller form (consumers.dead_letter).
    max_request_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
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
    model_config = settings_config("REDIS_")

    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "rs"
    password: SecretStr | None = None
    # Sentinel ("host:port" each): the primary of ``sentinel_master`` is found through them and
    # followed over a failover; ``url`` then gives only the database number.
    sentinels: tuple[str, ...] = ()
    sentinel_master: str = "mymaster"
    sentinel_password: SecretStr | None = None
    # Replicas that must also hold a final transition before its offset is committed (WAITAOF
    # 1 N, or WAIT N where appendfsync is always): 0 trusts the primary's disk alone, which a
    # failover to a replica that never received the transition loses. Set it where the primary
    # has replicas; while fewer are connected, final transitions wait (checkpoint_not_durable).
    replicas_to_confirm: int = Field(default=0, ge=0)
    connect_timeout_s: float = Field(default=2.0, gt=0)
    socket_timeout_s: float = Field(default=5.0, gt=0)  # a blocking outbox read stays below it
    outbox_group: str = "notifier"  # the consumer group that delivers outbox entries
    progress_stream_maxlen: int = Field(default=10_000, ge=100)  # approximate cap (MAXLEN ~)
    # A progress subscription quiet this long sends a PING, and ends when that is not answered
    # this long after (a dead connection would otherwise leave event streams silent for ever).
    progress_health_s: float = Field(default=10.0, gt=0)
    aof_wait_timeout_ms: int = Field(default=1_000, ge=0)  # WAITAOF after final transitions
    # Refuse to start on a Redis that cannot confirm a final transition is on disk before its
    # offset is committed (checkpoint/durability.py); false accepts losing about a second.
    require_durable: bool = True
    # How long the record of a done or failed video is kept; None: for ever. The videos table
    # stays the durable truth: a replay of an expired video is still skipped from it.
    finished_retention_s: float | None = Field(default=None, gt=0)
    # How long a deleted video's tombstone is kept: within it, an old upload event replayed
    # (a rebalance, a restore) does not bring the video back. None: for ever.
    deleted_retention_s: float | None = Field(default=30 * 86400.0, gt=0)


class StorageSettings(BaseSettings):
    """Where results live: Lance tables and the object store (local folders or S3)."""

    model_config = settings_config("STORAGE_")

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
    # bench.perf.lance_upkeep).
    lance_keep_versions_s: float = Field(default=600.0, ge=0)
    # A deleted video's rows are gone from disk too (old versions and index files included)
    # within this long of its deletion: its tables are compacted and their old versions
    # removed (sinks/lance_purge.py). Above lance_keep_versions_s.
    deletion_max_s: float = Field(default=86_400.0, gt=0)
    # One writer per Lance root, enforced by a Redis lease with a fencing token, checked before
    # every commit (sinks/writer_lease.py). Off only where nothing else can write the tables.
    writer_lease: bool = True
    # How long the lease outlives its holder's last renewal (renewed every third of it); a
    # writer without it waits this long for it at most, then its batch is retried.
    writer_lease_s: float = Field(default=15.0, gt=0)

    @model_validator(mode="after")
    def _purge_fits(self) -> StorageSettings:
        if self.deletion_max_s <= self.lance_keep_versions_s + 2:
            raise ValueError(
                "storage.deletion_max_s must be above storage.lance_keep_versions_s (plus 2 s): "
                "a deletion's old versions are removed once they are that old"
            )
        return self


class WebhookSubscription(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    tenant: str | None = None  # None: every tenant
    events: tuple[str, ...] = ("video.done", "video.failed", "video.deleted", "video.review")


class NotifySettings(BaseSettings):
    model_config = settings_config("NOTIFY_")

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
    # Of those, to one endpoint: one that hangs holds this many connections, never all of them.
    max_concurrency_per_endpoint: int = Field(default=4, ge=1)
    # Outbox entries held unacked at once (an entry waits only for its first attempts: later
    # ones wait in the delivery log's schedule, which every notifier reads this often).
    max_pending_events: int = Field(default=1000, ge=1)
    retry_poll_s: float = Field(default=1.0, gt=0)
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


class BackfillSettings(BaseSettings):
    """``reelsense backfill`` on Ray Data (``backfill.runner``)."""

    model_config = settings_config("BACKFILL_")

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
        unsigned. Weak tokens (``ApiSettings.weak_tokens``) no setting allows."""
        found: list[tuple[str, bool]] = [(weak, False) for weak in self.api.weak_tokens()]
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
        return cls.load_sourced(path, **overrides)[0]

    @classmethod
    def load_sourced(
        cls, path: str | Path | None = None, **overrides: Any
    ) -> tuple[ServiceConfig, dict[str, str]]:
        """``load``, and where each setting came from: path -> source (``core.config_sources``)."""
        sections: dict[str, Any] = {}
        if path is not None:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
            if not isinstance(loaded, dict):
                raise ValueError(f"{path}: expected a mapping of sections")
            # Old names in their new places, here already, so that sources name the new ones.
            sections.update({name: current_names(name, values) for name, values in loaded.items()})
        from_file = dict(sections)
        overrides = {name: current_names(name, values) for name, values in overrides.items()}
        for name, values in overrides.items():
            sections[name] = {**sections.get(name, {}), **values}
        built: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            settings_cls = field.annotation
            assert isinstance(settings_cls, type)
            built[name] = settings_cls(**sections.pop(name, {}))
        if sections:
            raise ValueError(f"unknown configuration sections: {sorted(sections)}")
        config = cls(**built)
        # An override replaces the file's value of its key whole (a pool included).
        file_kept: dict[str, Any] = {}
        for name, values in from_file.items():
            replaced = overrides.get(name, {})
            file_kept[name] = {key: value for key, value in values.items() if key not in replaced}
        return config, sources_of(config, [(OVERRIDE, overrides), (FILE, file_kept)])
