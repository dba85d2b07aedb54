// The TypeScript/Node client under Node's own test runner (`node --test test/`).
// Against a real stack when LB_URL is set (tests/clients/test_typescript_client.py
// starts one and passes LB_URL, LB_KEY_ID, LB_SECRET, LB_PLAYER_TOKEN_KEY, LB_BOARD,
// LB_GENERATION and LB_EXPECTED, the seeded generation's order); the retry policy
// and the error mapping run on a fake fetch without one.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { describe, test } from "node:test";

import {
  EventConflict,
  Forbidden,
  GenerationExpired,
  Invalid,
  LeaderboardClient,
  LeaderboardError,
  MAX_BATCH,
  NotFound,
  OutcomeUnknown,
  RateLimited,
  TooOld,
  Unauthorized,
  Unavailable,
  sign,
  statusOn,
} from "../src/index.js";

const URL_ = process.env.LB_URL;
const KEY_ID = process.env.LB_KEY_ID ?? "dev";
const SECRET = process.env.LB_SECRET ?? "dev-secret";
const BOARD = process.env.LB_BOARD ?? "alltime:all:global";
const noStack = URL_ ? false : "LB_URL is not set (no stack to test against)";

let counter = 0;
const run = `${process.pid}`;

function occurred() {
  return new Date(Date.now() - 5 * 60_000).toISOString().replace(/\.\d+Z$/, "Z");
}

function newEvent(playerId, points = 10, extra = {}) {
  counter += 1;
  return {
    eventId: `ts-${run}-E${counter}`,
    playerId,
    matchId: `ts-${run}-M${counter}`,
    sourceRevision: 1,
    occurredAt: occurred(),
    region: "eu",
    result: { points },
    ...extra,
  };
}

function player(name) {
  return `ts-${run}-${name}`;
}

function client(options = {}) {
  return new LeaderboardClient(URL_, { keyId: KEY_ID, secret: SECRET, ...options });
}

function playerToken(playerId) {
  // HS256 JWT (what a game's login service hands out), with node:crypto only.
  const b64 = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const head = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({ sub: playerId, iat: now, exp: now + 600 })}`;
  const mac = createHmac("sha256", process.env.LB_PLAYER_TOKEN_KEY).update(head).digest("base64url");
  return `${head}.${mac}`;
}

/** fetch that sends every request to the service but loses the answers of the
 * first `fail` writes after the service applied them. */
function losingFetch(how, state) {
  return async (url, init) => {
    const response = await fetch(url, init);
    if (init.method === "GET") return response;
    state.writes += 1;
    if (state.writes > state.fail) return response;
    await response.text();
    if (how === "timeout") {
      throw new DOMException("simulated: the answer was lost", "TimeoutError");
    }
    if (how === "reset") throw new TypeError("fetch failed (simulated reset)");
    return new Response(JSON.stringify({ error: "unavailable", detail: "simulated" }), {
      status: 503,
      headers: { "Retry-After": "0" },
    });
  };
}

describe("against a real stack", { skip: noStack }, () => {
  test("submit answers typed statuses", async () => {
    const lb = client();
    const who = player("status");
    const first = newEvent(who, 40, { matchId: `${who}-M1` });
    const accepted = await lb.submit(first);
    assert.equal(accepted.status, "accepted");
    assert.equal(statusOn(accepted, BOARD), "accepted");
    assert.equal(accepted.boards.find((b) => b.board === BOARD).total, 40);
    assert.equal((await lb.submit(first)).status, "duplicate");
    const older = newEvent(who, 99, { matchId: `${who}-M1` });
    assert.equal((await lb.submit(older)).status, "superseded");
    const fixed = newEvent(who, 25, {
      matchId: `${who}-M1`,
      sourceRevision: 2,
      kind: "correction",
      reason: "scoring bug",
    });
    assert.equal((await lb.submit(fixed)).status, "accepted");
    assert.equal((await lb.rank(BOARD, who)).score, 25);
  });

  test("a batch is split at 1,000 and keeps the order", async () => {
    const batches = [];
    const counting = async (url, init) => {
      if (String(url).endsWith(":batch")) batches.push(init.body.length);
      return fetch(url, init);
    };
    const lb = client({ fetch: counting });
    const events = Array.from({ length: MAX_BATCH + 3 }, (_, i) =>
      newEvent(player(`batch-P${i}`), 1 + (i % 9)),
    );
    events[1001].playerId = "not a valid id";
    const items = await lb.submitBatch(events);
    assert.equal(batches.length, 2);
    assert.equal(items.length, events.length);
    assert.equal(items[1001].error, "invalid_request");
    assert.equal(items[1001].eventId, events[1001].eventId);
    items.forEach((item, i) => {
      if (i !== 1001) assert.equal(item.status, "accepted", JSON.stringify(item));
    });
    assert.equal((await lb.rank(BOARD, events[1002].playerId)).score, events[1002].result.points);
  });

  for (const how of ["timeout", "reset", "503"]) {
    test(`a redelivery after a lost answer (${how}) counts once`, async () => {
      const state = { writes: 0, fail: 1 };
      const sleeps = [];
      const lb = client({
        fetch: losingFetch(how, state),
        sleep: async (ms) => void sleeps.push(ms),
        backoffBaseMs: 1,
      });
      const who = player(`redeliver-${how}`);
      const result = await lb.submit(newEvent(who, 17));
      assert.equal(state.writes, 2);
      assert.equal(sleeps.length, 1);
      assert.equal(result.status, "duplicate");
      assert.equal((await lb.rank(BOARD, who)).score, 17);

      state.fail = state.writes + 1;
      const batch = [0, 1, 2].map((i) => newEvent(`${who}-B${i}`, 3 + i));
      const items = await lb.submitBatch(batch);
      assert.deepEqual(
        items.map((i) => i.status),
        ["duplicate", "duplicate", "duplicate"],
      );
      for (const [i, event] of batch.entries()) {
        assert.equal((await lb.rank(BOARD, event.playerId)).score, 3 + i);
      }
    });
  }

  test("write errors raise their codes", async () => {
    const wrong = client({ secret: "wrong-secret" });
    await assert.rejects(wrong.submit(newEvent(player("auth"))), (e) => {
      assert.ok(e instanceof Unauthorized);
      assert.equal(e.status, 401);
      return true;
    });
    const lb = client();
    const sent = newEvent(player("conflict"), 5);
    await lb.submit(sent);
    await assert.rejects(lb.submit({ ...sent, result: { points: 6 } }), (e) => {
      assert.ok(e instanceof EventConflict);
      assert.deepEqual([e.status, e.code], [409, "event_conflict"]);
      return true;
    });
    await assert.rejects(lb.submit(newEvent("bad id!")), (e) => {
      assert.ok(e instanceof Invalid);
      assert.equal(e.field, "playerId");
      return true;
    });
    await assert.rejects(
      lb.submit(newEvent(player("old"), 1, { occurredAt: "2001-01-01T00:00:00Z" })),
      TooOld,
    );
    // The stack's LB_RATE_LIMIT=5/60: new matches of one player beyond the burst.
    const limited = player("rate");
    await assert.rejects(
      (async () => {
        for (let i = 0; i < 20; i++) await lb.submit(newEvent(limited));
      })(),
      (e) => {
        assert.ok(e instanceof RateLimited);
        assert.equal(e.status, 429);
        assert.ok(e.retryAfter > 0);
        return true;
      },
    );
  });

  test("read errors raise their codes", async () => {
    const lb = new LeaderboardClient(URL_);
    await assert.rejects(lb.top("alltime:all:nowhere"), (e) => e instanceof NotFound && e.code === "board_not_found");
    await assert.rejects(lb.rank(BOARD, player("nobody")), (e) => e.code === "player_not_found" && e.status === 404);
    await assert.rejects(lb.awards(BOARD), (e) => e instanceof NotFound && e.code === "awards_not_found");
  });

  test("reads carry their labels", async () => {
    const expected = JSON.parse(process.env.LB_EXPECTED);
    const lb = new LeaderboardClient(URL_);
    const snapshot = await lb.top(BOARD, { limit: 1000, mode: "snapshot" });
    assert.deepEqual(
      [snapshot.mode, snapshot.basis, snapshot.exactness, snapshot.errorBound],
      ["snapshot", "snapshot", "exact", 0],
    );
    assert.equal(snapshot.generation.id, process.env.LB_GENERATION);
    assert.deepEqual(
      snapshot.entries.map((e) => [e.playerId, e.score]),
      expected,
    );
    const live = await lb.top(BOARD, { limit: 5 });
    assert.deepEqual([live.mode, live.basis], ["live", "live"]);
    assert.ok(Object.keys(live.asOf).length > 0);
    const [who, score] = expected[5];
    const rank = await lb.rank(BOARD, who, { mode: "snapshot" });
    assert.equal(rank.score, score);
    assert.equal(rank.rank, 1 + expected.filter(([, s]) => s > score).length);
    const nearby = await lb.nearby(BOARD, who, { radius: 2, mode: "snapshot" });
    assert.deepEqual(
      nearby.entries.map((e) => e.playerId),
      expected.slice(3, 8).map(([p]) => p),
    );
    const boards = await lb.boards();
    assert.equal(boards.find((b) => b.board === BOARD).latestGeneration, process.env.LB_GENERATION);
  });

  test("iterEntries walks one generation by cursor", async () => {
    const expected = JSON.parse(process.env.LB_EXPECTED);
    const lb = new LeaderboardClient(URL_);
    const walked = [];
    for await (const entry of lb.iterEntries(BOARD, { limit: 6 })) {
      walked.push([entry.playerId, entry.score]);
    }
    assert.deepEqual(walked, expected);
  });

  test("friends need the player's token", async () => {
    const lb = client();
    const [a, b, c] = [player("fr-A"), player("fr-B"), player("fr-C")];
    await lb.submitBatch([newEvent(a, 30), newEvent(b, 50), newEvent(c, 10)]);
    await lb.setFriends(a, [b, c]);
    const friends = await lb.friends(BOARD, a, playerToken(a));
    assert.deepEqual(
      friends.entries.map((e) => [e.playerId, e.rank]),
      [[b, 1], [a, 2], [c, 3]],
    );
    assert.equal(friends.exactness, "exact");
    await assert.rejects(lb.friends(BOARD, a, "not-a-token"), Unauthorized);
    await assert.rejects(lb.friends(BOARD, a, playerToken(b)), Forbidden);
  });
});

describe("without a stack", () => {
  const fake = (answer, calls) => async (url, init) => {
    calls?.push({ url: String(url), ...init });
    return answer(url, init);
  };
  const json = (status, body, headers = {}) =>
    new Response(JSON.stringify(body), { status, headers });

  test("signatures are HMAC-SHA256 over '<t>.<body>'", () => {
    const expected = createHmac("sha256", "s").update('1700000000.{"a":1}').digest("hex");
    assert.equal(sign("s", '{"a":1}', 1700000000), `t=1700000000,v1=${expected}`);
  });

  test("attempts are bounded and resend the same body", async () => {
    const calls = [];
    const sleeps = [];
    const lb = new LeaderboardClient("http://lb.test", {
      keyId: "k",
      secret: "s",
      maxAttempts: 4,
      backoffBaseMs: 100,
      backoffCapMs: 1000,
      sleep: async (ms) => void sleeps.push(ms),
      fetch: fake(() => {
        throw new TypeError("fetch failed");
      }, calls),
    });
    await assert.rejects(lb.submit(newEvent("u-P1")), (e) => {
      assert.ok(e instanceof OutcomeUnknown);
      assert.equal(e.status, null);
      return true;
    });
    assert.equal(calls.length, 4);
    assert.equal(new Set(calls.map((c) => c.body)).size, 1);
    assert.equal(sleeps.length, 3);
    sleeps.forEach((ms, i) => assert.ok(ms >= 0 && ms <= Math.min(1000, 100 * 2 ** i)));

    const busy = new LeaderboardClient("http://lb.test", {
      keyId: "k",
      secret: "s",
      maxAttempts: 2,
      sleep: async () => {},
      fetch: fake(() => json(503, { error: "unavailable", detail: "down" })),
    });
    await assert.rejects(busy.submit(newEvent("u-P2")), (e) => e instanceof Unavailable && e instanceof OutcomeUnknown);
  });

  test("a 409 is not retried", async () => {
    const calls = [];
    const lb = new LeaderboardClient("http://lb.test", {
      keyId: "k",
      secret: "s",
      fetch: fake(() => json(409, { error: "event_conflict", detail: "x" }), calls),
    });
    await assert.rejects(lb.submit(newEvent("u-P3")), EventConflict);
    assert.equal(calls.length, 1);
  });

  const cases = [
    [429, { error: "rate_limited", detail: "x" }, { "Retry-After": "7" }, RateLimited],
    [410, { error: "generation_expired", detail: "x", latestGeneration: "g9" }, {}, GenerationExpired],
    [404, { error: "game_not_found", detail: "x" }, {}, NotFound],
    [422, { error: "implausible", detail: "x" }, {}, Invalid],
    [418, { error: "teapot", detail: "x" }, {}, LeaderboardError],
  ];
  for (const [status, body, headers, Cls] of cases) {
    test(`a ${status} ${body.error} raises ${Cls.name}`, async () => {
      const lb = new LeaderboardClient("http://lb.test", { fetch: fake(() => json(status, body, headers)) });
      await assert.rejects(lb.top(BOARD), (e) => {
        assert.ok(e instanceof Cls);
        assert.deepEqual([e.status, e.code, e.body], [status, body.error, body]);
        if (status === 429) assert.equal(e.retryAfter, 7);
        if (status === 410) assert.equal(e.latestGeneration, "g9");
        return true;
      });
    });
  }
});
