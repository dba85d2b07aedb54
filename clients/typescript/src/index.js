// Client of the leaderboard service for Node game servers (Node 18+: fetch and
// crypto built in; no dependencies). Types: index.d.ts beside this file.
//
// Writes are signed (X-Key-Id, X-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
// "<t>.<raw body>")>). A 503, a timeout or a lost connection means the outcome is
// unknown: the client sends the same bytes again (same eventId and content, signed
// afresh) after a jittered exponential back-off, a bounded number of times. The
// service answers a redelivery with the saved result of the first acceptance
// ("duplicate"), so an event is never counted twice.

import { createHmac } from "node:crypto";

export const MAX_BATCH = 1000;

export class LeaderboardError extends Error {
  /**
   * @param {string} detail
   * @param {{code?: string, status?: number|null, body?: object, retryAfter?: number|null}} [info]
   */
  constructor(detail, info = {}) {
    super(detail);
    this.name = new.target.name;
    this.detail = detail;
    this.code = info.code ?? new.target.defaultCode;
    this.status = info.status ?? new.target.defaultStatus;
    this.body = info.body ?? {};
    this.retryAfter = info.retryAfter ?? null;
  }
  static defaultCode = "error";
  static defaultStatus = null;
}

export class Unauthorized extends LeaderboardError {
  static defaultCode = "unauthorized";
  static defaultStatus = 401;
}
export class Forbidden extends LeaderboardError {
  static defaultCode = "forbidden";
  static defaultStatus = 403;
}
export class NotFound extends LeaderboardError {
  static defaultCode = "not_found";
  static defaultStatus = 404;
}
export class EventConflict extends LeaderboardError {
  static defaultCode = "event_conflict";
  static defaultStatus = 409;
}
export class Conflict extends LeaderboardError {
  static defaultCode = "conflict";
  static defaultStatus = 409;
}
export class GenerationExpired extends LeaderboardError {
  static defaultCode = "generation_expired";
  static defaultStatus = 410;
  get latestGeneration() {
    return this.body.latestGeneration ?? null;
  }
}
export class PayloadTooLarge extends LeaderboardError {
  static defaultCode = "payload_too_large";
  static defaultStatus = 413;
}
export class Invalid extends LeaderboardError {
  static defaultCode = "invalid_request";
  static defaultStatus = 422;
  get field() {
    return this.body.field ?? null;
  }
}
export class TooOld extends Invalid {
  static defaultCode = "too_old";
}
export class Implausible extends Invalid {
  static defaultCode = "implausible";
}
export class RateLimited extends LeaderboardError {
  static defaultCode = "rate_limited";
  static defaultStatus = 429;
}
/** No answer after every attempt: the write may or may not have been applied;
 * redelivering the same event later is always safe. */
export class OutcomeUnknown extends LeaderboardError {
  static defaultCode = "outcome_unknown";
}
export class Unavailable extends OutcomeUnknown {
  static defaultCode = "unavailable";
  static defaultStatus = 503;
}

const BY_CODE = {
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  forbidden_game: Forbidden,
  board_not_found: NotFound,
  player_not_found: NotFound,
  awards_not_found: NotFound,
  game_not_found: NotFound,
  generation_not_found: NotFound,
  season_not_found: NotFound,
  not_found: NotFound,
  event_conflict: EventConflict,
  generation_expired: GenerationExpired,
  payload_too_large: PayloadTooLarge,
  invalid_request: Invalid,
  too_old: TooOld,
  implausible: Implausible,
  rate_limited: RateLimited,
  unavailable: Unavailable,
  not_ready: Unavailable,
};
const BY_STATUS = {
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  410: GenerationExpired,
  413: PayloadTooLarge,
  422: Invalid,
  429: RateLimited,
  503: Unavailable,
};

/** The exception of an error answer (status null: a batch item's error). */
export function errorFor(status, body, retryAfter = null) {
  const code = String(body?.error ?? "error");
  const detail = String(body?.detail ?? code);
  const Cls = Object.hasOwn(BY_CODE, code)
    ? BY_CODE[code]
    : (BY_STATUS[status] ?? LeaderboardError);
  if (retryAfter == null && typeof body?.retryAfter === "number") {
    retryAfter = body.retryAfter;
  }
  return new Cls(detail, {
    code,
    status: status ?? Cls.defaultStatus,
    body: body ?? {},
    retryAfter,
  });
}

/** The X-Signature value of `body` (a string or bytes) at `timestamp` (unix s). */
export function sign(secret, body, timestamp = Math.floor(Date.now() / 1000)) {
  const mac = createHmac("sha256", secret)
    .update(`${timestamp}.`)
    .update(body)
    .digest("hex");
  return `t=${timestamp},v1=${mac}`;
}

/** This event's status on `board`: the board item's own when it differs, the
 * event's otherwise; null when the event did not feed that board. */
export function statusOn(result, board) {
  const item = (result.boards ?? []).find((b) => b.board === board);
  if (!item) return null;
  return item.status ?? result.status;
}

function segment(value) {
  return encodeURIComponent(value).replace(/%3A/gi, ":").replace(/%40/g, "@");
}

function retryable(error) {
  // fetch rejects with a TypeError on network failures (connection refused or
  // reset, socket closed before the answer) and with an AbortError/TimeoutError
  // when the signal's timeout fires: the request may have reached the service.
  return (
    error instanceof TypeError ||
    error?.name === "AbortError" ||
    error?.name === "TimeoutError"
  );
}

export class LeaderboardClient {
  /**
   * @param {string} baseUrl e.g. "http://127.0.0.1:8080"
   * @param {import("./index.js").ClientOptions} [options]
   */
  constructor(baseUrl, options = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.keyId = options.keyId ?? null;
    this.secret = options.secret ?? null;
    this.game = options.game ?? null;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxAttempts = options.maxAttempts ?? 5;
    if (!(this.maxAttempts >= 1)) throw new RangeError("maxAttempts must be >= 1");
    this.backoffBaseMs = options.backoffBaseMs ?? 100;
    this.backoffCapMs = options.backoffCapMs ?? 5_000;
    this.fetch = options.fetch ?? globalThis.fetch;
    this.sleep =
      options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.random = options.random ?? Math.random;
    this.readerToken = options.readerToken ?? null;
  }

  /** Full jitter: attempt n (0-based) waits uniformly in [0, min(cap, base*2^n)]
   * milliseconds, and at least a Retry-After (capped too). */
  backoffMs(attempt, retryAfterSeconds = null) {
    const ceiling = Math.min(this.backoffCapMs, this.backoffBaseMs * 2 ** attempt);
    let wait = this.random() * ceiling;
    if (retryAfterSeconds != null) {
      wait = Math.max(wait, Math.min(retryAfterSeconds * 1000, this.backoffCapMs));
    }
    return wait;
  }

  path(tail) {
    return this.game == null ? `/v1/${tail}` : `/v1/games/${segment(this.game)}/${tail}`;
  }

  boardPath(board, tail = "") {
    return this.path(`boards/${segment(board)}${tail}`);
  }

  async send(method, path, { body = null, params = {}, headers = {} } = {}) {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(params)) {
      if (v != null) url.searchParams.set(k, String(v));
    }
    let last = null;
    for (let attempt = 0; attempt < this.maxAttempts; attempt++) {
      const sent = { ...headers };
      if (body != null) {
        if (this.keyId == null || this.secret == null) {
          throw new Error("writes need keyId and secret");
        }
        sent["Content-Type"] = "application/json";
        sent["X-Key-Id"] = this.keyId;
        sent["X-Signature"] = sign(this.secret, body);
      } else if (this.readerToken && !sent.Authorization) {
        sent.Authorization = `Bearer ${this.readerToken}`;
      }
      let retryAfter = null;
      try {
        const response = await this.fetch(url, {
          method,
          headers: sent,
          body: body ?? undefined,
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        const text = await response.text();
        if (response.status < 400) return JSON.parse(text);
        const error = LeaderboardClient.errorOf(response, text);
        if (response.status !== 503) throw error;
        last = error;
        retryAfter = error.retryAfter;
      } catch (error) {
        if (error instanceof LeaderboardError) throw error;
        if (!retryable(error)) throw error;
        last = new OutcomeUnknown(
          `${error.name}: ${error.message} (after ${attempt + 1} attempts)`,
          { status: null },
        );
        last.cause = error;
      }
      if (attempt + 1 < this.maxAttempts) {
        await this.sleep(this.backoffMs(attempt, retryAfter));
      }
    }
    throw last;
  }

  static errorOf(response, text) {
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      body = null;
    }
    if (body == null || typeof body !== "object" || Array.isArray(body)) {
      body = { error: "http_error", detail: text.slice(0, 200) };
    }
    const header = response.headers.get("retry-after");
    const retryAfter = header != null && !Number.isNaN(Number(header)) ? Number(header) : null;
    const error = errorFor(response.status, body, retryAfter);
    if (response.status === 503 && !(error instanceof Unavailable)) {
      return new Unavailable(error.detail, { code: error.code, body, retryAfter });
    }
    return error;
  }

  // -- writes -------------------------------------------------------------------

  /** One score event; redelivered (same bytes) until it has an answer. */
  async submit(event) {
    return this.send("POST", this.path("score-events"), { body: JSON.stringify(event) });
  }

  /** Events in requests of at most `batchSize` (1,000); one item per event, in
   * order: a result, or `{eventId, error, detail}` for an event refused. */
  async submitBatch(events, { batchSize = MAX_BATCH } = {}) {
    if (!(batchSize >= 1 && batchSize <= MAX_BATCH)) {
      throw new RangeError(`batchSize must be 1..${MAX_BATCH}`);
    }
    const all = [...events];
    const items = [];
    for (let start = 0; start < all.length; start += batchSize) {
      const chunk = all.slice(start, start + batchSize);
      let answer;
      try {
        answer = await this.send("POST", this.path("score-events:batch"), {
          body: JSON.stringify({ events: chunk }),
        });
      } catch (error) {
        if (error instanceof OutcomeUnknown) error.completed = [...items];
        throw error;
      }
      answer.results.forEach((result, i) => {
        items.push("error" in result ? { eventId: chunk[i].eventId ?? null, ...result } : result);
      });
    }
    return items;
  }

  async setFriends(playerId, friends) {
    const body = JSON.stringify({ friends: [...friends] });
    return this.send("PUT", `/v1/players/${segment(playerId)}/friends`, { body });
  }

  async setProfile(playerId, profile) {
    const body = JSON.stringify(profile);
    return this.send("PUT", `/v1/players/${segment(playerId)}/profile`, { body });
  }

  // -- reads --------------------------------------------------------------------

  async games() {
    return (await this.send("GET", "/v1/games")).games;
  }

  async boards() {
    return (await this.send("GET", this.path("boards"))).boards;
  }

  async top(board, { limit = 100, mode, generation, ranking } = {}) {
    return this.send("GET", this.boardPath(board, "/top"), {
      params: { limit, mode, generation, ranking },
    });
  }

  async rank(board, playerId, { mode, generation, ranking } = {}) {
    return this.send("GET", this.boardPath(board, `/players/${segment(playerId)}`), {
      params: { mode, generation, ranking },
    });
  }

  async nearby(board, playerId, { radius = 5, mode, generation, ranking } = {}) {
    return this.send(
      "GET",
      this.boardPath(board, `/players/${segment(playerId)}/nearby`),
      { params: { radius, mode, generation, ranking } },
    );
  }

  async entries(board, { cursor, limit = 50, generation, ranking } = {}) {
    return this.send("GET", this.boardPath(board, "/entries"), {
      params: { cursor, limit, generation, ranking },
    });
  }

  /** Every entry of one generation, page by page (the first page's cursor pins
   * its generation). */
  async *iterEntries(board, { limit = 50, generation } = {}) {
    let page = await this.entries(board, { limit, generation });
    for (;;) {
      yield* page.entries;
      if (page.cursors.after == null) return;
      page = await this.entries(board, { cursor: page.cursors.after, limit });
    }
  }

  async friends(board, playerId, playerToken, { mode, generation, ranking } = {}) {
    return this.send(
      "GET",
      this.boardPath(board, `/players/${segment(playerId)}/friends`),
      {
        params: { mode, generation, ranking },
        headers: { Authorization: `Bearer ${playerToken}` },
      },
    );
  }

  async awards(board, { version, cursor, limit = 50 } = {}) {
    return this.send("GET", this.boardPath(board, "/awards"), {
      params: { version, cursor, limit },
    });
  }

  async *iterAwards(board, { version, limit = 50 } = {}) {
    let page = await this.awards(board, { version, limit });
    for (;;) {
      yield* page.entries;
      if (page.cursors.after == null) return;
      page = await this.awards(board, { version: page.version, cursor: page.cursors.after, limit });
    }
  }
}
