// The leaderboard page: reads the public JSON API and refreshes without reloading.
// State lives in the URL hash (#board=...&player=...&mode=...), so a view can be shared.
"use strict";

const params = new URLSearchParams(location.search);
// ?refresh=<ms> shortens the refresh period (used by the browser test).
const REFRESH_MS = Math.max(500, Number(params.get("refresh")) || 5000);
const TOP_LIMIT = 20;
const NEARBY_RADIUS = 5;

const $ = (selector) => document.querySelector(selector);
const state = { game: "default", board: null, mode: "live", player: null, publishedAt: null, busy: false, token: "" };
const fmt = new Intl.NumberFormat("en-US");

// Reads may need a token (LB_READ_AUTH=token): after a read answers 401 the page
// asks for one (a reader token, or a player token), keeps it in sessionStorage for
// this tab only, and sends it as the Bearer header from then on.
const TOKEN_KEY = "lb.readToken";
let tokenNeeded = false;
let tokenAsked = null;

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch (_) {
    return "";
  }
}

async function fetchJSON(path, token) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const reply = await fetch(path, { headers });
  let body = {};
  try {
    body = await reply.json();
  } catch (_) {
    body = {};
  }
  return { status: reply.status, body, token };
}

// Shows the token form until a token is entered (one prompt for concurrent reads).
function askForToken(detail) {
  if (!tokenAsked) {
    tokenAsked = new Promise((resolve) => {
      const form = $("#token-form");
      setText("#token-error", detail ? `reads need a token: ${detail}` : "reads need a token");
      form.hidden = false;
      $("#token").focus();
      const submit = (event) => {
        event.preventDefault();
        const token = $("#token").value.trim();
        if (!token) return;
        try {
          sessionStorage.setItem(TOKEN_KEY, token);
        } catch (_) {
          // Storage refused (private mode): the token still serves this page.
        }
        state.token = token;
        $("#token").value = "";
        form.hidden = true;
        form.removeEventListener("submit", submit);
        tokenAsked = null;
        resolve();
      };
      form.addEventListener("submit", submit);
    });
  }
  return tokenAsked;
}

async function getJSON(path) {
  const current = () => state.token || storedToken();
  let reply = await fetchJSON(path, tokenNeeded ? current() : "");
  while (reply.status === 401) {
    tokenNeeded = true;
    if (current() && reply.token !== current()) {
      reply = await fetchJSON(path, current());
      continue;
    }
    // No token, or the one sent is refused (wrong or expired): ask for another.
    state.token = "";
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch (_) {
      // nothing stored
    }
    await askForToken(reply.body.detail);
    reply = await fetchJSON(path, current());
  }
  return reply;
}

// The game default's boards are the unprefixed paths; another game's live under
// /v1/games/{gameId} (API.md "Games").
const gamePath = () =>
  state.game === "default" ? "/v1" : `/v1/games/${encodeURIComponent(state.game)}`;
const boardPath = (board) => `${gamePath()}/boards/${encodeURIComponent(board)}`;

function readHash() {
  const hash = new URLSearchParams(location.hash.slice(1));
  return {
    game: hash.get("game"), board: hash.get("board"), player: hash.get("player"),
    mode: hash.get("mode"),
  };
}

function writeHash() {
  const hash = new URLSearchParams();
  if (state.game !== "default") hash.set("game", state.game);
  if (state.board) hash.set("board", state.board);
  if (state.mode !== "live") hash.set("mode", state.mode);
  if (state.player) hash.set("player", state.player);
  history.replaceState(null, "", `#${hash}`);
}

function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

// Shown to one decimal at 10 % and above, two below (the API gives six).
function percent(value) {
  return value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

function setText(selector, text) {
  const node = $(selector);
  if (node.textContent !== text) node.textContent = text;
}

function showError(selector, message) {
  const node = $(selector);
  node.textContent = message || "";
  node.hidden = !message;
}

// ---------------------------------------------------------------- labels

function renderLabels(body) {
  const exact = body.exactness === "exact";
  const badge = $("#exactness");
  badge.className = `badge ${exact ? "exact" : "approximate"}`;
  badge.textContent = exact ? "exact" : `approximate ±${fmt.format(body.errorBound)}`;
  badge.dataset.exactness = body.exactness;
  badge.dataset.errorBound = body.errorBound;
  const basis = $("#basis");
  basis.textContent = body.basis;
  basis.dataset.basis = body.basis;
  const generation = body.generation;
  state.publishedAt = generation ? generation.publishedAt : null;
  const node = $("#generation");
  node.dataset.generation = generation ? generation.id : "";
  renderAge();
  setText("#population", `${fmt.format(body.population)} players`);
  $("#population").dataset.population = body.population;
  // Redis unreachable: the API answers from the latest generation and says so.
  $("#live-layer").hidden = body.liveLayer !== "unavailable";
}

function renderAge() {
  const node = $("#generation");
  const id = node.dataset.generation;
  setText("#generation", id ? `generation ${id}, published ${ago(state.publishedAt)}` : "no generation published yet");
}

function labelLine(body) {
  const exact = body.exactness === "exact" ? "exact" : `approximate ±${body.errorBound}`;
  const generation = body.generation ? body.generation.id : "none";
  return `${exact} · basis ${body.basis} · generation ${generation}`;
}

// ---------------------------------------------------------------- tables

// A player's display name (set by the game's servers, PUT .../profile) and country
// when it has them, else its id; always put in the page as text.
function playerLabel(entry) {
  const name = entry.displayName ?? entry.playerId;
  return entry.country ? `${name} (${entry.country})` : name;
}

function playerTitle(entry) {
  return entry.displayName ? `${entry.displayName}: ${entry.playerId}` : entry.playerId;
}

// Ties are visible: a rank shared with another player is shown as "2=" and shaded.
// rank < position means someone listed earlier has the same score (even off-screen);
// ``entries`` may hold one row past the shown ones, to see a tie below the last.
function fillRanked(tbody, entries, highlight, shown = entries) {
  const rows = shown.map((entry) => {
    const i = entries.indexOf(entry);
    const tied =
      entry.rank < entry.position ||
      (i + 1 < entries.length && entries[i + 1].rank === entry.rank);
    const tr = document.createElement("tr");
    if (tied) tr.classList.add("tie");
    if (highlight && entry.playerId === highlight) {
      tr.classList.add("me");
      tr.setAttribute("aria-current", "true");
    }
    tr.dataset.player = entry.playerId;
    tr.dataset.rank = entry.rank;
    tr.dataset.score = entry.score;
    tr.dataset.position = entry.position;
    const cells = [
      ["num", String(entry.position)],
      ["num rank", tied ? `${entry.rank}=` : String(entry.rank)],
      ["player", playerLabel(entry)],
      ["num", fmt.format(entry.score)],
    ];
    for (const [cls, text] of cells) {
      const td = document.createElement("td");
      td.className = cls;
      td.textContent = text; // as text: a display name is never markup
      if (cls === "player") td.title = playerTitle(entry);
      tr.appendChild(td);
    }
    return tr;
  });
  tbody.replaceChildren(...rows);
}

async function refreshTop() {
  const { status, body } = await getJSON(
    `${boardPath(state.board)}/top?limit=${TOP_LIMIT + 1}&mode=${state.mode}`
  );
  if (status !== 200) {
    showError("#page-error", body.detail || `top list: HTTP ${status}`);
    return;
  }
  showError("#page-error", "");
  renderLabels(body);
  const shown = body.entries.slice(0, TOP_LIMIT);
  setText("#top-count", shown.length ? `${shown.length}` : "(nobody yet)");
  fillRanked($("#top tbody"), body.entries, state.player, shown);
}

async function refreshPlayer() {
  const panel = $("#player-result");
  if (!state.player) {
    panel.hidden = true;
    return;
  }
  const base = `${boardPath(state.board)}/players/${encodeURIComponent(state.player)}`;
  const [rank, nearby] = await Promise.all([
    getJSON(`${base}?mode=${state.mode}`),
    // One more row each side than shown, to see ties at the window's edges.
    getJSON(`${base}/nearby?radius=${NEARBY_RADIUS + 1}&mode=${state.mode}`),
  ]);
  if (rank.status !== 200) {
    panel.hidden = true;
    const message =
      rank.status === 404
        ? `${state.player} is not on ${state.board}`
        : rank.body.detail || `HTTP ${rank.status}`;
    showError("#player-error", message);
    return;
  }
  showError("#player-error", "");
  const body = rank.body;
  setText("#p-rank", String(body.rank));
  setText("#p-top", `${percent(body.topPercent)}%`);
  setText("#p-score", fmt.format(body.score));
  $("#p-rank").dataset.value = body.rank;
  $("#p-top").dataset.value = body.topPercent;
  $("#p-score").dataset.value = body.score;
  setText("#p-labels", `${playerTitle(body)}: ${labelLine(body)}`);
  if (nearby.status === 200) {
    const entries = nearby.body.entries;
    const me = entries.find((e) => e.playerId === state.player);
    const center = me ? me.position : body.position;
    const shown = entries.filter((e) => Math.abs(e.position - center) <= NEARBY_RADIUS);
    fillRanked($("#nearby tbody"), entries, state.player, shown);
  }
  panel.hidden = false;
  state.playerScore = body.score;
}

// ---------------------------------------------------------------- chart

// Equi-depth buckets hold about the same number of players each, so bar heights are
// densities (players per point of score) and widths follow the score range: the
// area of a bar is its player count.
async function refreshChart() {
  const { status, body } = await getJSON(`${boardPath(state.board)}/histogram`);
  const chart = $("#chart");
  if (status !== 200 || !body.buckets.length) {
    chart.replaceChildren();
    chart.dataset.buckets = "0";
    setText("#chart-basis", status === 200 || status === 404 ? "No published generation with players yet." : body.detail || "");
    return;
  }
  const buckets = body.buckets;
  const low = buckets[0].lower;
  const high = Math.max(body.maxScore ?? low, buckets[buckets.length - 1].lower) + 1;
  const W = 640, H = 220, left = 8, bottom = 24, top = 8;
  const span = Math.max(1, high - low);
  const x = (score) => left + ((score - low) / span) * (W - 2 * left);
  const density = buckets.map((b) => b.count / Math.max(1, (b.upper ?? high) - b.lower));
  const peak = Math.max(...density, 1e-9);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "score distribution");
  const base = document.createElementNS(ns, "line");
  base.setAttribute("x1", left);
  base.setAttribute("x2", W - left);
  base.setAttribute("y1", H - bottom);
  base.setAttribute("y2", H - bottom);
  svg.appendChild(base);
  buckets.forEach((bucket, i) => {
    const upper = bucket.upper ?? high;
    const rect = document.createElementNS(ns, "rect");
    const height = (density[i] / peak) * (H - bottom - top);
    rect.setAttribute("x", x(bucket.lower));
    rect.setAttribute("width", Math.max(1, x(upper) - x(bucket.lower) - 0.5));
    rect.setAttribute("y", H - bottom - height);
    rect.setAttribute("height", Math.max(0.5, height));
    rect.setAttribute("class", "bar");
    const mine =
      state.playerScore !== undefined && state.player &&
      state.playerScore >= bucket.lower && state.playerScore < upper;
    if (mine) rect.classList.add("me");
    rect.dataset.lower = bucket.lower;
    rect.dataset.count = bucket.count;
    const title = document.createElementNS(ns, "title");
    title.textContent = `scores ${fmt.format(bucket.lower)}–${fmt.format(upper - 1)}: ${fmt.format(bucket.count)} players`;
    rect.appendChild(title);
    svg.appendChild(rect);
  });
  for (const [score, anchor] of [[low, "start"], [high - 1, "end"]]) {
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", anchor === "start" ? left : W - left);
    label.setAttribute("y", H - 6);
    label.setAttribute("text-anchor", anchor);
    label.setAttribute("class", "axis");
    label.textContent = fmt.format(score);
    svg.appendChild(label);
  }
  chart.replaceChildren(svg);
  chart.dataset.buckets = String(buckets.length);
  const total = buckets.reduce((sum, b) => sum + b.count, 0);
  setText(
    "#chart-basis",
    `${buckets.length} buckets, ${fmt.format(total)} players: exact counts of ` +
      `generation ${body.generation.id} (basis ${body.basis}, as of its boundary). ` +
      "Bar area = players; height = players per point of score."
  );
}

// ---------------------------------------------------------------- awards

async function refreshAwards() {
  const card = $("#awards-card");
  if (!state.board.startsWith("season:")) {
    card.hidden = true;
    return;
  }
  const { status, body } = await getJSON(`${boardPath(state.board)}/awards?limit=${TOP_LIMIT}`);
  if (status !== 200 || !Array.isArray(body.entries)) {
    card.hidden = true; // 404 awards_not_found until the season is closed
    return;
  }
  const rows = body.entries.map((entry) => {
    const tr = document.createElement("tr");
    for (const [cls, text] of [
      ["num", String(entry.rank)],
      ["player", playerLabel(entry)],
      ["num", fmt.format(entry.score)],
      ["tier", entry.tier ?? ""],
    ]) {
      const td = document.createElement("td");
      td.className = cls;
      td.textContent = text;
      tr.appendChild(td);
    }
    return tr;
  });
  $("#awards tbody").replaceChildren(...rows);
  setText(
    "#awards-meta",
    `Season ${body.season}, award version ${body.version}, from generation ` +
      `${body.generation}${body.closedAt ? `, closed ${ago(body.closedAt)}` : ""}; ` +
      `the first ${body.entries.length} of ${fmt.format(body.population ?? body.entries.length)} players.`
  );
  card.hidden = false;
}

// ---------------------------------------------------------------- wiring

async function refreshAll() {
  if (!state.board || state.busy) return;
  state.busy = true;
  try {
    await refreshTop();
    await refreshPlayer();
    // refreshHistory: web/history.js (why a rank changed), loaded after this file.
    const historyTask = typeof refreshHistory === "function" ? refreshHistory() : null;
    await Promise.all([refreshChart(), refreshAwards(), historyTask]);
    setText("#updated", `updated ${new Date().toLocaleTimeString("en-GB")}`);
    document.body.dataset.refreshed = String(Date.now());
  } catch (error) {
    showError("#page-error", `cannot reach the API: ${error}`);
  } finally {
    state.busy = false;
  }
}

async function loadGames(wanted) {
  // The game selector shows only when the deployment serves more than one game.
  const { status, body } = await getJSON("/v1/games");
  const games = status === 200 ? body.games.map((g) => g.game) : ["default"];
  const select = $("#game");
  select.replaceChildren(...games.map((game) => {
    const option = document.createElement("option");
    option.value = game;
    option.textContent = game;
    return option;
  }));
  $("#game-label").hidden = games.length < 2;
  return games.includes(wanted) ? wanted : games[0] || "default";
}

async function loadBoards() {
  const { status, body } = await getJSON(`${gamePath()}/boards`);
  if (status !== 200) {
    showError("#page-error", body.detail || `boards: HTTP ${status}`);
    return [];
  }
  const select = $("#board");
  const groups = new Map();
  for (const board of body.boards) {
    if (!groups.has(board.window)) {
      const group = document.createElement("optgroup");
      group.label = board.window;
      groups.set(board.window, group);
    }
    const option = document.createElement("option");
    option.value = board.board;
    option.textContent = board.board + (board.state && board.state !== "open" ? ` (${board.state})` : "");
    groups.get(board.window).appendChild(option);
  }
  select.replaceChildren(...groups.values());
  return body.boards;
}

function pickBoard(boards, wanted) {
  const names = boards.map((b) => b.board);
  if (wanted && names.includes(wanted)) return wanted;
  const published = boards.filter((b) => b.latestGeneration);
  const season = published.find((b) => b.window === "season" && b.scope === "global");
  return (season || published[0] || boards[0] || {}).board || null;
}

async function start() {
  const wanted = readHash();
  state.mode = wanted.mode === "snapshot" ? "snapshot" : "live";
  state.player = wanted.player || null;
  $("#mode").value = state.mode;
  if (state.player) $("#player").value = state.player;
  state.game = await loadGames(wanted.game);
  $("#game").value = state.game;
  const boards = await loadBoards();
  state.board = pickBoard(boards, wanted.board);
  if (!state.board) {
    showError("#page-error", "No boards yet: publish a generation (lb publish).");
    return;
  }
  $("#board").value = state.board;
  writeHash();

  $("#game").addEventListener("change", async (event) => {
    state.game = event.target.value;
    const boards = await loadBoards();
    state.board = pickBoard(boards, state.board);
    if (state.board) $("#board").value = state.board;
    writeHash();
    refreshAll();
  });
  $("#board").addEventListener("change", (event) => {
    state.board = event.target.value;
    writeHash();
    refreshAll();
  });
  $("#mode").addEventListener("change", (event) => {
    state.mode = event.target.value;
    writeHash();
    refreshAll();
  });
  // No inline handler (the page's CSP refuses them): the controls never submit.
  $("#controls").addEventListener("submit", (event) => event.preventDefault());
  $("#search").addEventListener("submit", (event) => {
    event.preventDefault();
    state.player = $("#player").value.trim() || null;
    state.playerScore = undefined;
    writeHash();
    refreshAll();
  });
  setInterval(() => {
    if ($("#auto").checked && !document.hidden) refreshAll();
  }, REFRESH_MS);
  setInterval(renderAge, 1000);
  await refreshAll();
  document.body.dataset.ready = "true";
}

start();
