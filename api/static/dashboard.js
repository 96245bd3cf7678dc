// The reelsense dashboard: videos in flight (with a bar per stage), recently done videos and
// their results (shots with thumbnails, the transcript and the text on screen over time),
// the review queue with a reviewer's verdict given in a queued video's result, recent failures
// and throughput per stage, from the progress, results and review APIs. No libraries, nothing
// loaded from elsewhere.
//
// Everything shown comes from untrusted uploads (ids, URIs, error messages): the page builds
// its DOM with textContent only, never innerHTML.
"use strict";

(() => {
  const FAILURES_SHOWN = 20;
  const DONE_SHOWN = 10;
  const THROUGHPUT_VIDEOS = 50;
  const REFRESH_MS = 15000;
  const QUEUE_PAGE = 100;
  const QUEUE_CAP = 500; // per decision: the oldest are the ones to look at first
  const REVIEWER_KEY = "reelsense-reviewer";

  const inflight = new Map(); // video_id -> {video_id, tenant, stages, started_at}
  let stageOrder = []; // the pipeline's stages in order, from /v1/stages
  let token = readToken();
  let streamGeneration = 0;
  let refreshTimer = null;

  function readToken() {
    const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
    if (fromHash) {
      // Keep the token out of the address bar and history once it is read.
      sessionStorage.setItem("reelsense-token", fromHash);
      history.replaceState(null, "", location.pathname + location.search);
      return fromHash;
    }
    return sessionStorage.getItem("reelsense-token") || "";
  }

  function authHeaders() {
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (name === "text") node.textContent = value;
      else if (name === "style") Object.assign(node.style, value);
      else node.setAttribute(name, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function showError(message) {
    const box = document.getElementById("error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  function setStreamState(state, label) {
    const badge = document.getElementById("stream-state");
    badge.dataset.state = state;
    badge.textContent = label;
  }

  class Unauthorized extends Error {}

  async function getJSON(path) {
    const response = await fetch(path, { headers: authHeaders() });
    if (response.status === 401) throw new Unauthorized("a valid API token is needed");
    if (!response.ok) throw new Error(`${path} answered ${response.status}`);
    return response.json();
  }

  // What failed and why, in the API's own words ({"error": {"code", "message"}}) where it
  // gave them.
  async function failure(response, what) {
    let why = "";
    try {
      const { error } = await response.json();
      if (error && error.message) why = `: ${error.code}: ${error.message}`;
    } catch {
      // not JSON: the status says enough
    }
    return `${what} answered ${response.status}${why}`;
  }

  // A failure in the page's words: the token asked for again, or the error line.
  function report(error) {
    if (error instanceof Unauthorized) askForToken();
    else showError(String(error.message || error));
  }

  function ago(iso) {
    if (!iso) return "";
    const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
    if (seconds < 90) return `${seconds} s ago`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
    return `${Math.round(seconds / 3600)} h ago`;
  }

  async function loadStages() {
    if (stageOrder.length === 0) stageOrder = (await getJSON("/v1/stages")).stages;
  }

  function stageNames(stages) {
    const names = Object.keys(stages);
    const rank = (name) => {
      const at = stageOrder.indexOf(name);
      return at < 0 ? stageOrder.length : at;
    };
    return names.sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  }

  // -- in flight ------------------------------------------------------------------------------

  function stageBars(video) {
    const grid = el("div", { class: "stages" });
    for (const name of stageNames(video.stages || {})) {
      const { done, total, applicable } = video.stages[name];
      // A stage with nothing to do for the video (speech without an audio track) counts as
      // finished: a full bar, shown as not applicable.
      const skipped = applicable === false;
      const known = !skipped && total !== null && total !== undefined && total > 0;
      const percent = known ? Math.min(100, Math.round((100 * done) / total)) : 100;
      const measured = known || skipped;
      const bar = el(
        "div",
        {
          class: "bar",
          role: "progressbar",
          "data-stage": name,
          "data-done": String(done),
          "data-total": known ? String(total) : "",
          "data-applicable": String(!skipped),
          "aria-label": skipped ? `${name}: not applicable` : `${name} progress`,
          ...(measured ? { "aria-valuenow": String(percent), "aria-valuemin": "0", "aria-valuemax": "100" } : {}),
        },
        el("span", { style: { width: `${percent}%` } }),
      );
      const count = skipped ? "n/a" : known ? `${done}/${total}` : `${done}/?`;
      grid.append(
        el("span", { class: "stage-name", text: name }),
        bar,
        el("span", { class: "stage-count", text: count, ...(skipped ? { title: "nothing to do for this video" } : {}) }),
      );
    }
    return grid;
  }

  function renderInflight() {
    const body = document.querySelector("#inflight tbody");
    const videos = [...inflight.values()].sort((a, b) =>
      String(a.started_at || "").localeCompare(String(b.started_at || "")),
    );
    body.replaceChildren(
      ...videos.map((video) =>
        el(
          "tr",
          { "data-video-id": video.video_id },
          el("td", { class: "video-id", text: video.video_id }),
          el("td", { text: video.tenant }),
          el("td", {}, stageBars(video)),
          el("td", { class: "meta", text: ago(video.started_at) }),
        ),
      ),
    );
    document.getElementById("inflight-count").textContent = String(videos.length);
    document.getElementById("inflight-empty").hidden = videos.length > 0;
    document.getElementById("inflight").hidden = videos.length === 0;
  }

  async function loadInflight() {
    const page = await getJSON("/v1/videos?status=running&limit=200");
    inflight.clear();
    for (const video of page.items) inflight.set(video.video_id, video);
    renderInflight();
  }

  // -- failures -------------------------------------------------------------------------------

  async function loadFailures() {
    const page = await getJSON(`/v1/videos?status=failed&limit=${FAILURES_SHOWN}`);
    const list = document.getElementById("failures");
    list.replaceChildren(
      ...page.items.map((video) =>
        el(
          "li",
          { "data-video-id": video.video_id },
          el("span", { class: "code", text: video.error_code || "unknown" }),
          " ",
          el("strong", { class: "video-id", text: video.video_id }),
          " ",
          el("span", {
            class: "meta",
            text: `${video.tenant}${video.stage ? ` · ${video.stage}` : ""} · ${ago(video.finished_at || video.updated_at)}`,
          }),
          el("span", { class: "message meta", text: video.error_message || "" }),
        ),
      ),
    );
    document.getElementById("failures-count").textContent = String(page.items.length);
    document.getElementById("failures-empty").hidden = page.items.length > 0;
  }

  // -- done videos and their results ----------------------------------------------------------

  let shownResult = null; // the video whose result is asked for (open once it has loaded)
  let openResult = null; // {videoId, version, verdicts}: the result on view and its verdicts
  let thumbnailUrls = []; // object URLs of the open result's thumbnails, revoked on change

  function clock(seconds) {
    const tenths = Math.round(seconds * 10);
    const minutes = Math.floor(tenths / 600);
    return `${minutes}:${((tenths % 600) / 10).toFixed(1).padStart(4, "0")}`;
  }

  function renderDone(videos) {
    const list = document.getElementById("done");
    list.replaceChildren(
      ...videos.slice(0, DONE_SHOWN).map((video) => {
        const open = el("button", { type: "button", class: "link video-id", text: video.video_id });
        open.addEventListener("click", () =>
          showResult(video.video_id).catch((error) => showError(String(error.message || error))),
        );
        return el(
          "li",
          { "data-video-id": video.video_id },
          open,
          " ",
          el("span", { class: "meta", text: `${video.tenant} · ${video.frames || 0} frames · ${ago(video.finished_at || video.updated_at)}` }),
        );
      }),
    );
    document.getElementById("done-count").textContent = String(Math.min(videos.length, DONE_SHOWN));
    document.getElementById("done-empty").hidden = videos.length > 0;
  }

  // What the VLM said of a shot: its caption, and its scene, tags and safety labels below.
  function describe(description) {
    const labels = [description.scene_type, ...description.tags];
    const flagged = description.safety.length ? [el("span", { class: "code", text: `safety: ${description.safety.join(", ")}` })] : [];
    return [
      el("span", { class: "caption", text: description.caption }),
      el("span", { class: "meta", text: labels.join(" · ") }),
      ...flagged,
    ];
  }

  // What is shown in each shot (the shot_labels stage): its labels, strongest first.
  function shotLabels(body) {
    const segments = body.outputs?.shot_labels?.segments ?? [];
    return new Map(segments.map((segment) => [segment.attributes.shot, segment.attributes.labels]));
  }

  // <img> cannot send an Authorization header: thumbnails are fetched and shown as blobs.
  async function thumbnail(url) {
    const response = await fetch(url, { headers: authHeaders() });
    if (!response.ok) return el("span", { class: "no-thumb meta", text: "no image" });
    const src = URL.createObjectURL(await response.blob());
    thumbnailUrls.push(src);
    return el("img", { src, alt: "" });
  }

  async function showResult(videoId) {
    shownResult = videoId;
    const path = `/v1/videos/${encodeURIComponent(videoId)}/result`;
    const [body, verdicts] = await Promise.all([getJSON(path), verdictsOf(videoId)]);
    if (shownResult !== videoId) return;
    for (const url of thumbnailUrls) URL.revokeObjectURL(url);
    thumbnailUrls = [];
    document.getElementById("result").hidden = false;
    document.getElementById("result-video").textContent = videoId;
    document.getElementById("result-json").href = path;
    document.getElementById("result-vtt").href = `${path}.vtt?track=text`;
    document.getElementById("result-speech-vtt").href = `${path}.vtt?track=speech`;
    document.getElementById("result-chapters-vtt").href = `${path}.vtt?track=chapters`;
    renderSummary(body.outputs?.summary?.data);
    renderDuplicates(body.outputs?.duplicates?.data?.duplicates ?? []);
    renderChapters(body.outputs?.chapters?.data?.chapters ?? []);
    await renderReview(body.outputs?.review?.data, body.shots);
    if (shownResult !== videoId) return;
    openResult = { videoId, version: body.pipeline_version, verdicts };
    renderVerdict();
    const labelled = shotLabels(body);
    const shots = await Promise.all(
      body.shots.map(async (shot) =>
        el(
          "li",
          { "data-shot": String(shot.index) },
          shot.thumbnail_url ? await thumbnail(shot.thumbnail_url) : el("span", { class: "no-thumb meta", text: "no sample" }),
          el("span", { class: "meta", text: `${clock(shot.start_s)}–${clock(shot.end_s)} · ${shot.entered_by}` }),
          ...(shot.description ? describe(shot.description) : []),
          ...(labelled.has(shot.index)
            ? [el("span", { class: "labels", text: labelled.get(shot.index).map((l) => `${l.name} ${Math.round(l.score * 100)}%`).join(" · ") })]
            : []),
        ),
      ),
    );
    document.getElementById("shots").replaceChildren(...shots);
    document.querySelector("#spans tbody").replaceChildren(
      ...body.text_spans.map((span) =>
        el(
          "tr",
          {},
          el("td", { class: "meta", text: `${clock(span.start_s)}–${clock(span.end_s)}` }),
          el("td", { class: "span-text", text: span.text }),
          el("td", { class: "meta", text: span.score.toFixed(2) }),
        ),
      ),
    );
    renderSpeech(body.speech);
  }

  // Places matching the query, best first: a thumbnail of the shot, when, what matched and
  // the text; a click opens the video's result below.
  async function search(query, kind) {
    const params = new URLSearchParams({ q: query, k: "10" });
    if (kind) params.append("kind", kind);
    const body = await getJSON(`/v1/search?${params}`);
    const hits = await Promise.all(
      body.hits.map(async (hit) => {
        const open = el("button", { type: "button", class: "link video-id", text: hit.video_id });
        open.addEventListener("click", () =>
          showResult(hit.video_id).catch((error) => showError(String(error.message || error))),
        );
        const when = `${clock(hit.start_s)}–${clock(hit.end_s)} · ${hit.kinds.join(", ")}${hit.partial ? " · partial" : ""}`;
        return el(
          "li",
          { "data-video-id": hit.video_id },
          hit.thumbnail ? await thumbnail(hit.thumbnail) : el("span", { class: "no-thumb meta", text: "no image" }),
          el("div", {}, open, " ", el("span", { class: "meta", text: when }), el("span", { class: "hit-text", text: hit.text })),
        );
      }),
    );
    document.getElementById("search-hits").replaceChildren(...hits);
    document.getElementById("search-empty").hidden = hits.length > 0;
  }

  // One line on a result's speech: what was heard, or why there is nothing (recognition off,
  // no audio track, or the failure's reason: the segments before it are still shown).
  function speechStatus(speech) {
    if (!speech) return "Speech recognition was off for this video.";
    if (speech.status === "no_audio") return "No audio track.";
    const heard = `${clock(speech.audio_s)} of audio`;
    if (speech.status === "failed") {
      const error = speech.error || {};
      return `Failed after ${heard}: ${error.code || "unknown"}: ${error.message || ""}`;
    }
    if (!speech.language) return `Nothing said in ${heard}.`;
    // The other languages heard, where a video switches language.
    const others = [...new Set(speech.segments.map((s) => s.language).filter(Boolean))].filter(
      (language) => language !== speech.language,
    );
    const also = others.length ? ` (also ${others.join(", ")})` : "";
    return `${speech.language}${also} · ${heard}`;
  }

  // The summary stage's answer: the summary, then its category and tags (hidden without one).
  function renderSummary(data) {
    const answered = Boolean(data && data.summary);
    document.getElementById("summary").hidden = !answered;
    document.getElementById("summary-text").textContent = answered ? data.summary : "";
    document.getElementById("summary-meta").textContent = answered
      ? [data.category, ...(data.tags || [])].join(" · ")
      : "";
  }

  // The earlier videos this one copies: each one's id, score and spans (hidden without any).
  function renderDuplicates(found) {
    const line = document.getElementById("duplicates");
    line.hidden = found.length === 0;
    line.textContent = found.length
      ? "Re-upload of: " +
        found
          .map((other) => {
            const spans = other.spans
              .map((s) => `${clock(s.start_s)}–${clock(s.end_s)} = ${clock(s.other_start_s)}–${clock(s.other_end_s)}`)
              .join(", ");
            return `${other.video_id} ${other.score.toFixed(2)}${other.mirrored ? " mirrored" : ""} (${spans})`;
          })
          .join("; ")
      : "";
  }

  // The review stage's decision, each flagged category's score, and each finding: when, what,
  // where it was (on screen, said, in a QR code), and the thumbnail of the shot that shows it.
  async function renderReview(data, shots) {
    document.getElementById("review-part").hidden = !data;
    if (!data) return;
    const decision = document.getElementById("review-decision");
    decision.textContent = data.decision;
    decision.dataset.decision = data.decision;
    const categories = Object.entries(data.categories || {});
    document.getElementById("review-categories").textContent = categories
      .map(([name, found]) => `${name} ${found.score.toFixed(2)} (${found.decision})`)
      .join(" · ");
    const where = { text: "on screen", speech: "said", qr: "in a QR code", description: "described" };
    const items = await Promise.all(
      categories.flatMap(([, found]) => found.evidence).map(async (finding) => {
        const shot = finding.frame_s === null ? null : shotAt(shots, finding.frame_s);
        return el(
          "li",
          { "data-category": finding.category },
          shot && shot.thumbnail_url ? await thumbnail(shot.thumbnail_url) : "",
          el("span", { class: "meta", text: `${clock(finding.start_s)}–${clock(finding.end_s)}` }),
          " ",
          el("strong", { text: `${finding.category} · ${finding.kind}` }),
          " ",
          el("span", { class: "review-value", text: finding.value }),
          " ",
          el("span", { class: "meta", text: `${where[finding.source] || finding.source}, ${Math.round(finding.confidence * 100)}%` }),
        );
      }),
    );
    document.getElementById("review-evidence").replaceChildren(...items);
  }

  // The shot a time falls in.
  function shotAt(shots, t) {
    return shots.find((shot) => shot.start_s <= t && t < shot.end_s) || shots[shots.length - 1] || null;
  }

  // The chapters stage's chapters: when each starts and ends, its title and one line on it.
  function renderChapters(chapters) {
    document.getElementById("chapters-part").hidden = chapters.length === 0;
    document.getElementById("chapters").replaceChildren(
      ...chapters.map((chapter) =>
        el(
          "li",
          {},
          el("span", { class: "meta", text: `${clock(chapter.start_s)}–${clock(chapter.end_s)}` }),
          " ",
          el("strong", { class: "chapter-title", text: chapter.title }),
          " ",
          el("span", { class: "chapter-summary", text: chapter.summary }),
        ),
      ),
    );
  }

  function renderSpeech(speech) {
    const status = document.getElementById("speech-status");
    status.textContent = speechStatus(speech);
    status.dataset.status = speech ? speech.status : "off";
    const segments = speech ? speech.segments : [];
    document.querySelector("#speech tbody").replaceChildren(
      ...segments.map((segment) =>
        el(
          "tr",
          {},
          el("td", { class: "meta", text: `${clock(segment.start_s)}–${clock(segment.end_s)}` }),
          el("td", { class: "meta speech-language", text: segment.language || "" }),
          el("td", { class: "speech-text", text: segment.text.trim() }),
        ),
      ),
    );
    document.getElementById("speech").hidden = segments.length === 0;
    // The music and singing heard (speech events are the transcript's already).
    const sounds = ((speech && speech.audio_events) || []).filter((e) => e.kind !== "speech");
    const line = document.getElementById("audio-events");
    line.textContent = sounds.length
      ? `Audio: ${sounds.map((e) => `${e.kind} ${clock(e.start_s)}–${clock(e.end_s)}`).join(", ")}`
      : "";
    line.hidden = sounds.length === 0;
  }

  // -- the review queue and verdicts --------------------------------------------------------

  const queued = new Set(); // ids of the videos in the queue, as last read
  let queueReads = 0; // a read that a later one overtook is dropped

  // One decision's queue, oldest first, page after page up to QUEUE_CAP videos.
  async function queueOf(decision) {
    const items = [];
    let cursor = null;
    do {
      const params = new URLSearchParams({ decision, limit: String(QUEUE_PAGE) });
      if (cursor) params.append("cursor", cursor);
      const page = await getJSON(`/v1/review?${params}`);
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && items.length < QUEUE_CAP);
    return { items: items.slice(0, QUEUE_CAP), more: Boolean(cursor) };
  }

  async function loadReviewQueue() {
    const read = ++queueReads;
    const [review, block] = await Promise.all([queueOf("review"), queueOf("block")]);
    if (read !== queueReads) return;
    // Both queues as one list, oldest done first (the sort is stable for equal times).
    const items = [...review.items, ...block.items].sort(
      (a, b) => Date.parse(a.done_at) - Date.parse(b.done_at),
    );
    const wasQueued = Boolean(openResult && queued.has(openResult.videoId));
    queued.clear();
    for (const item of items) queued.add(item.video_id);
    renderQueue(items);
    const note = document.getElementById("queue-note");
    const capped = review.more || block.more ? ` · only the oldest ${QUEUE_CAP} of each shown` : "";
    note.textContent = `${review.items.length} to review · ${block.items.length} blocked${capped}`;
    note.hidden = items.length === 0;
    if (wasQueued && !queued.has(openResult.videoId)) {
      // The open video left the queue (a verdict given elsewhere): show the verdict it got.
      await refreshVerdicts(openResult.videoId);
    }
    renderVerdict();
  }

  // A category's flagged score, "0.62", or "?" where the review stage gave none.
  function score(value) {
    return typeof value === "number" ? value.toFixed(2) : "?";
  }

  function renderQueue(items) {
    document.getElementById("queue").replaceChildren(
      ...items.map((item) => {
        const open = el("button", { type: "button", class: "link video-id", text: item.video_id });
        open.addEventListener("click", () => showResult(item.video_id).catch(report));
        const all = Object.entries(item.categories || {});
        const flagged = all.filter(([, found]) => found.decision === "review" || found.decision === "block");
        const categories = el("span", { class: "queue-categories meta" });
        (flagged.length ? flagged : all)
          .sort(([, a], [, b]) => (b.score ?? 0) - (a.score ?? 0))
          .forEach(([name, found], at) => {
            if (at) categories.append(" · ");
            categories.append(el("span", { class: "queue-category", "data-decision": found.decision || "", text: `${name} ${score(found.score)}` }));
          });
        return el(
          "li",
          { "data-video-id": item.video_id, "data-decision": item.decision },
          open,
          " ",
          el("span", { class: "queue-decision", "data-decision": item.decision, text: item.decision }),
          " ",
          el("span", { class: "meta queue-done", title: item.done_at, text: `done ${ago(item.done_at)}` }),
          categories,
        );
      }),
    );
    document.getElementById("queue-count").textContent = String(items.length);
    document.getElementById("queue-empty").hidden = items.length > 0;
  }

  // The verdicts a video has had, oldest first (none for a video the API does not know).
  async function verdictsOf(videoId) {
    const path = `/v1/review/${encodeURIComponent(videoId)}/history`;
    const response = await fetch(path, { headers: authHeaders() });
    if (response.status === 401) throw new Unauthorized("a valid API token is needed");
    if (response.status === 404) return [];
    if (!response.ok) throw new Error(await failure(response, path));
    return (await response.json()).verdicts;
  }

  async function refreshVerdicts(videoId) {
    const verdicts = await verdictsOf(videoId);
    if (openResult && openResult.videoId === videoId) openResult.verdicts = verdicts;
  }

  // The open result's last verdict, and the verdict buttons while the video is in the queue.
  function renderVerdict() {
    const inQueue = Boolean(openResult && queued.has(openResult.videoId));
    const last = openResult ? openResult.verdicts[openResult.verdicts.length - 1] : undefined;
    const given = document.getElementById("verdict-given");
    given.hidden = !last;
    if (last) {
      const note = last.note ? `: ${last.note}` : "";
      const version = last.pipeline_version !== openResult.version ? ` · for pipeline version ${last.pipeline_version}` : "";
      given.dataset.verdict = last.verdict;
      given.textContent = `${last.verdict} by ${last.reviewer}${note} · ${ago(last.at)}${version}`;
    }
    document.getElementById("verdict-form").hidden = !inQueue;
    document.getElementById("verdict-part").hidden = !inQueue && !last;
  }

  async function giveVerdict(verdict) {
    if (!openResult) return;
    const { videoId } = openResult;
    const reviewerBox = document.getElementById("verdict-reviewer");
    const noteBox = document.getElementById("verdict-note");
    const reviewer = reviewerBox.value.trim();
    if (!reviewer) {
      showError("Enter the reviewer's name to give a verdict.");
      reviewerBox.focus();
      return;
    }
    localStorage.setItem(REVIEWER_KEY, reviewer);
    const note = noteBox.value.trim();
    const buttons = document.querySelectorAll("#verdict-form button");
    for (const button of buttons) button.disabled = true;
    try {
      const path = `/v1/review/${encodeURIComponent(videoId)}`;
      const response = await fetch(path, {
        method: "POST",
        headers: { ...authHeaders(), "Content-Type": "application/json" },
        body: JSON.stringify({ verdict, reviewer, ...(note ? { note } : {}) }),
      });
      if (response.status === 401) throw new Unauthorized("a valid API token is needed");
      if (!response.ok) throw new Error(await failure(response, `${verdict} ${videoId}`));
      const given = await response.json();
      noteBox.value = "";
      showError("");
      queued.delete(videoId);
      if (openResult && openResult.videoId === videoId) openResult.verdicts.push(given);
      renderVerdict();
    } catch (error) {
      report(error);
    } finally {
      for (const button of buttons) button.disabled = false;
    }
    // Whatever the answer, the queue as it now is (a 409: someone else's verdict took it out).
    await Promise.all([loadReviewQueue(), refreshVerdicts(videoId).then(renderVerdict)]).catch(report);
  }

  // -- throughput -----------------------------------------------------------------------------

  function throughput(videos) {
    const byStage = new Map();
    for (const video of videos) {
      for (const [stage, seconds] of Object.entries(video.timings || {})) {
        if (stage === "total" || !(seconds > 0)) continue;
        const sum = byStage.get(stage) || { seconds: 0, frames: 0 };
        sum.seconds += seconds;
        sum.frames += video.frames || 0;
        byStage.set(stage, sum);
      }
    }
    return byStage;
  }

  async function loadThroughput() {
    const page = await getJSON(`/v1/videos?status=done&limit=${THROUGHPUT_VIDEOS}`);
    renderDone(page.items);
    const sums = throughput(page.items);
    const body = document.querySelector("#throughput tbody");
    const names = stageNames(Object.fromEntries(sums));
    body.replaceChildren(
      ...names.map((stage) => {
        const { seconds, frames } = sums.get(stage);
        return el(
          "tr",
          { "data-stage": stage },
          el("td", { text: stage }),
          el("td", { class: "rate", text: (frames / seconds).toFixed(1) }),
          el("td", { text: `${seconds.toFixed(2)} s` }),
          el("td", { text: String(frames) }),
        );
      }),
    );
    document.getElementById("throughput-videos").textContent = String(page.items.length);
  }

  // -- live events ----------------------------------------------------------------------------

  function applyProgress(update) {
    if (update.status === "done" || update.status === "failed") {
      inflight.delete(update.video_id);
      scheduleRefresh(300);
    } else if (update.status === "running") {
      const video = inflight.get(update.video_id) || {
        video_id: update.video_id,
        tenant: update.tenant,
        stages: {},
        started_at: update.at,
      };
      if (update.stage) {
        const { done, total, applicable } = update;
        video.stages[update.stage] = { done, total, applicable };
      }
      inflight.set(update.video_id, video);
    }
    renderInflight();
  }

  function handleBlock(block) {
    let name = "message";
    const data = [];
    for (const line of block.split(/\r\n|\r|\n/)) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (name === "progress" && data.length) applyProgress(JSON.parse(data.join("\n")));
  }

  // EventSource cannot send an Authorization header, so the stream is read with fetch.
  async function stream(generation) {
    while (generation === streamGeneration) {
      try {
        const response = await fetch("/v1/events", {
          headers: { ...authHeaders(), Accept: "text/event-stream" },
        });
        if (response.status === 401) throw new Unauthorized("a valid API token is needed");
        if (!response.ok || !response.body) throw new Error(`event stream: ${response.status}`);
        setStreamState("live", "live");
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done || generation !== streamGeneration) break;
          buffer += value;
          let match;
          while ((match = /\r\n\r\n|\n\n|\r\r/.exec(buffer))) {
            handleBlock(buffer.slice(0, match.index));
            buffer = buffer.slice(match.index + match[0].length);
          }
        }
      } catch (error) {
        if (error instanceof Unauthorized) {
          askForToken();
          return;
        }
      }
      if (generation !== streamGeneration) return;
      setStreamState("down", "reconnecting…");
      await new Promise((resolve) => setTimeout(resolve, 2000));
      scheduleRefresh(0);
    }
  }

  // -- wiring ---------------------------------------------------------------------------------

  async function refreshAll() {
    try {
      await loadStages(); // once: the lists below are laid out in pipeline order
      await Promise.all([loadInflight(), loadFailures(), loadThroughput(), loadReviewQueue()]);
      showError("");
    } catch (error) {
      report(error);
    }
  }

  function scheduleRefresh(delay) {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => {
      refreshAll();
      scheduleRefresh(REFRESH_MS);
    }, delay);
  }

  function askForToken() {
    setStreamState("down", "token needed");
    showError("This API needs a token: enter one above.");
    document.getElementById("token-form").hidden = false;
  }

  function start() {
    streamGeneration += 1;
    stream(streamGeneration);
    scheduleRefresh(0);
  }

  document.getElementById("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = document.getElementById("search-query").value.trim();
    if (!query) return;
    search(query, document.getElementById("search-kind").value).catch(report);
  });

  const reviewerBox = document.getElementById("verdict-reviewer");
  reviewerBox.value = localStorage.getItem(REVIEWER_KEY) || "";
  reviewerBox.addEventListener("change", () => localStorage.setItem(REVIEWER_KEY, reviewerBox.value.trim()));
  document.getElementById("verdict-form").addEventListener("submit", (event) => event.preventDefault());
  for (const button of document.querySelectorAll("#verdict-form button")) {
    button.addEventListener("click", () => giveVerdict(button.dataset.verdict));
  }

  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    token = document.getElementById("token").value.trim();
    sessionStorage.setItem("reelsense-token", token);
    document.getElementById("token-form").hidden = true;
    start();
  });
  start();
})();
