// Why a rank changed: the searched player's history over the retained generations
// and award snapshots, as a small inline SVG chart of rank (newest on the right) and
// the contributions of each step. Loaded after app.js; uses its state and getJSON.
// Every text goes in through textContent: nothing from the API is parsed as markup.
"use strict";

const HISTORY_LIMIT = 10;
const SVG_NS = "http://www.w3.org/2000/svg";

function historyLabel(entry) {
  const g = entry.generation;
  return g.award ? `${g.id} (award v${g.award.version})` : g.id;
}

function historyChart(entries) {
  // Oldest first, left to right; rank 1 at the top.
  const points = entries.slice().reverse();
  const W = 640, H = 160, pad = 24;
  const worst = Math.max(...points.map((e) => e.rank), 1);
  const x = (i) => pad + (points.length > 1 ? (i / (points.length - 1)) * (W - 2 * pad) : (W - 2 * pad) / 2);
  const y = (rank) => pad + (worst > 1 ? ((rank - 1) / (worst - 1)) * (H - 2 * pad) : (H - 2 * pad) / 2);
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "rank per generation");
  const line = document.createElementNS(SVG_NS, "polyline");
  line.setAttribute("points", points.map((e, i) => `${x(i)},${y(e.rank)}`).join(" "));
  line.setAttribute("class", "history-line");
  svg.appendChild(line);
  points.forEach((entry, i) => {
    const dot = document.createElementNS(SVG_NS, "circle");
    dot.setAttribute("cx", x(i));
    dot.setAttribute("cy", y(entry.rank));
    dot.setAttribute("r", 4);
    dot.setAttribute("class", "history-dot");
    dot.dataset.rank = entry.rank;
    const title = document.createElementNS(SVG_NS, "title");
    title.textContent = `${historyLabel(entry)}: rank ${entry.rank}, score ${fmt.format(entry.score)}`;
    dot.appendChild(title);
    svg.appendChild(dot);
    const label = document.createElementNS(SVG_NS, "text");
    label.setAttribute("x", x(i));
    label.setAttribute("y", H - 4);
    label.setAttribute("text-anchor", "middle");
    label.setAttribute("class", "axis");
    label.textContent = historyLabel(entry);
    svg.appendChild(label);
  });
  return svg;
}

function historyRow(entry) {
  const tr = document.createElement("tr");
  const change = entry.rankChange;
  const moved = change
    ? `${change.from} → ${change.to} (+${change.newlyAbove} above, −${change.noLongerAbove} no longer above, own ${change.ownScoreChange >= 0 ? "+" : ""}${change.ownScoreChange})`
    : "first listed";
  const events = entry.changes.length
    ? entry.changes
        .map((c) => `${c.eventId} ${c.kind} ${c.matchId}: ${c.delta >= 0 ? "+" : ""}${c.delta}`)
        .join("; ")
    : "no contributions";
  for (const [cls, text] of [
    ["", historyLabel(entry)],
    ["num", String(entry.rank)],
    ["num", fmt.format(entry.score)],
    ["", moved],
    ["", events],
  ]) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    tr.appendChild(td);
  }
  return tr;
}

async function refreshHistory() {
  const card = $("#history-card");
  if (!card) return;
  if (!state.player) {
    card.hidden = true;
    return;
  }
  const path =
    `${boardPath(state.board)}/players/${encodeURIComponent(state.player)}` +
    `/history?limit=${HISTORY_LIMIT}`;
  const { status, body } = await getJSON(path);
  if (status !== 200 || !body.entries.length) {
    card.hidden = true;
    return;
  }
  $("#history-chart").replaceChildren(historyChart(body.entries));
  $("#history tbody").replaceChildren(...body.entries.map(historyRow));
  card.dataset.entries = String(body.entries.length);
  card.hidden = false;
}
