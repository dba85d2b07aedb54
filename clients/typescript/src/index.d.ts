// Types of the leaderboard client (src/index.js). The shapes are the service's JSON
// (camelCase, API.md); answers may carry more fields than listed.

export declare const MAX_BATCH: 1000;

export type Status = "accepted" | "duplicate" | "superseded" | "late-review" | "quarantined";
export type Mode = "live" | "snapshot" | "approx";
export type Ranking = "competition" | "dense" | "ordinal";

export interface ScoreEvent {
  eventId: string;
  playerId: string;
  matchId: string;
  sourceRevision: number;
  occurredAt: string;
  region?: string;
  result: { points: number; [key: string]: unknown };
  kind?: "result" | "correction";
  reason?: string | null;
  [key: string]: unknown;
}

export interface BoardOutcome {
  board: string;
  total: number;
  version: number;
  /** present when this board's outcome differs from the event's */
  status?: Status;
}

export interface EventResult {
  eventId: string;
  playerId: string;
  status: Status;
  boards: BoardOutcome[];
  partition: number;
  position: number;
}

export interface EventError {
  eventId: string | null;
  error: string;
  detail: string;
  retryAfter?: number;
  [key: string]: unknown;
}

export type BatchItem = EventResult | EventError;

export interface Generation {
  id: string;
  publishedAt: string | null;
  boundary: Record<string, number>;
  complete: boolean;
}

export interface Labels {
  board: string;
  mode: Mode;
  exactness: "exact" | "approximate";
  basis: "live" | "snapshot" | "histogram";
  errorBound: number;
  generation: Generation | null;
  asOf: Record<string, number>;
  population: number;
  ranking?: Ranking;
  liveLayer?: "unavailable";
}

export interface Entry {
  position: number;
  rank: number;
  playerId: string;
  score: number;
  displayName?: string;
  country?: string;
}

export interface Cursors {
  before: string | null;
  after: string | null;
}

export interface Top extends Labels {
  entries: Entry[];
}

export interface PlayerRank extends Labels {
  playerId: string;
  score: number;
  rank: number;
  position?: number;
  topPercent: number;
}

export interface Page extends Labels {
  playerId?: string;
  entries: Entry[];
  cursors: Cursors;
}

export interface Friends extends Labels {
  playerId: string;
  entries: Entry[];
}

export interface AwardEntry extends Entry {
  tier: string | null;
}

export interface Awards {
  board: string;
  season: string;
  version: number;
  generation: string;
  boundary: Record<string, number>;
  hash: string;
  closedAt: string;
  population: number;
  entries: AwardEntry[];
  cursors: Cursors;
}

export interface Board {
  board: string;
  window: string;
  period: string;
  scope: string;
  aggregation: string;
  /** "desc": higher scores are better; "asc": lower ones */
  order: "desc" | "asc";
  tieBreak: string;
  rule: string;
  state: "open" | "closing" | "closed";
  closesAt: string | null;
  nextReset?: string | null;
  latestGeneration: string | null;
}

export interface ClientOptions {
  /** a game-server key of LB_HMAC_KEYS (writes only) */
  keyId?: string;
  secret?: string;
  /** a game's own paths (/v1/games/{game}/...); unset: the game `default` */
  game?: string;
  /** per attempt (default 10,000) */
  timeoutMs?: number;
  /** attempts of one request on 503s, timeouts and connection errors (default 5) */
  maxAttempts?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  fetch?: typeof globalThis.fetch;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
  /** sent as Authorization: Bearer on reads (LB_READ_AUTH=token) */
  readerToken?: string;
}

export interface ReadOptions {
  mode?: Mode;
  generation?: string;
  ranking?: Ranking;
}

export declare class LeaderboardError extends Error {
  constructor(
    detail: string,
    info?: { code?: string; status?: number | null; body?: object; retryAfter?: number | null },
  );
  detail: string;
  code: string;
  status: number | null;
  body: Record<string, unknown>;
  retryAfter: number | null;
}
export declare class Unauthorized extends LeaderboardError {}
export declare class Forbidden extends LeaderboardError {}
export declare class NotFound extends LeaderboardError {}
export declare class EventConflict extends LeaderboardError {}
export declare class Conflict extends LeaderboardError {}
export declare class GenerationExpired extends LeaderboardError {
  readonly latestGeneration: string | null;
}
export declare class PayloadTooLarge extends LeaderboardError {}
export declare class Invalid extends LeaderboardError {
  readonly field: string | null;
}
export declare class TooOld extends Invalid {}
export declare class Implausible extends Invalid {}
export declare class RateLimited extends LeaderboardError {}
export declare class OutcomeUnknown extends LeaderboardError {
  /** submitBatch: the items of the requests that were answered */
  completed?: BatchItem[];
}
export declare class Unavailable extends OutcomeUnknown {}

export declare function errorFor(
  status: number | null,
  body: Record<string, unknown>,
  retryAfter?: number | null,
): LeaderboardError;
export declare function sign(secret: string, body: string | Uint8Array, timestamp?: number): string;
export declare function statusOn(result: EventResult, board: string): Status | null;

export declare class LeaderboardClient {
  constructor(baseUrl: string, options?: ClientOptions);
  backoffMs(attempt: number, retryAfterSeconds?: number | null): number;
  submit(event: ScoreEvent): Promise<EventResult>;
  submitBatch(events: Iterable<ScoreEvent>, options?: { batchSize?: number }): Promise<BatchItem[]>;
  setFriends(playerId: string, friends: Iterable<string>): Promise<{ playerId: string; friends: string[] }>;
  setProfile(
    playerId: string,
    profile: { displayName?: string; country?: string },
  ): Promise<Record<string, unknown>>;
  games(): Promise<Record<string, unknown>[]>;
  boards(): Promise<Board[]>;
  top(board: string, options?: ReadOptions & { limit?: number }): Promise<Top>;
  rank(board: string, playerId: string, options?: ReadOptions): Promise<PlayerRank>;
  nearby(board: string, playerId: string, options?: ReadOptions & { radius?: number }): Promise<Page>;
  entries(
    board: string,
    options?: { cursor?: string; limit?: number; generation?: string; ranking?: Ranking },
  ): Promise<Page>;
  iterEntries(board: string, options?: { limit?: number; generation?: string }): AsyncGenerator<Entry>;
  friends(board: string, playerId: string, playerToken: string, options?: ReadOptions): Promise<Friends>;
  awards(board: string, options?: { version?: number; cursor?: string; limit?: number }): Promise<Awards>;
  iterAwards(board: string, options?: { version?: number; limit?: number }): AsyncGenerator<AwardEntry>;
}
