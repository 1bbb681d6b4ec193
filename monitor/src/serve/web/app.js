// The approvals page of `monitor serve`. Every string a tool wrote reaches the page as
// text (textContent, never markup). The token stays in this tab's sessionStorage and is
// sent as a bearer header only: nothing a browser sends by itself (no cookie) decides.
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("hr-token");
let streaming = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c) e.append(c);
  return e;
}

async function api(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: Object.assign(
      token ? { Authorization: "Bearer " + token } : {},
      body ? { "Content-Type": "application/json" } : {}
    ),
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await resp.text();
  let data = null;
  try { data = JSON.parse(text); } catch (_) { data = { error: text }; }
  if (!resp.ok) {
    const err = new Error((data && data.error) || resp.statusText);
    err.status = resp.status;
    err.data = data;
    throw err;
  }
  return data;
}

// What a tool passed on its command line may hold control characters: shown, not acted on.
const visible = (s) => String(s).replace(/[\u0000-\u001f\u007f-\u009f]/g, "\ufffd");

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + "s";
  if (s < 3600) return Math.round(s / 60) + "m";
  if (s < 86400) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

// `decidePath`: where its decision goes (a decision link's own endpoint, or the approval's).
function approvalCard(a, decidePath) {
  const card = el("div", { class: "card", "data-approval": a.approval_id });
  card.append(el("h3", { text: a.question }));
  if (a.context) card.append(el("pre", { class: "context", text: a.context }));
  const command = (a.command || []).map(visible).join(" ");
  card.append(el("div", { class: "meta", text:
    a.tool_name + " · " + command + " · in " + (a.cwd || "?") + " · on " + (a.host || "?") +
    " · asked " + age(a.created_at) + " ago · " + a.approval_id }));
  // Required reviewers and wait timers: who approved, how many more (the server says).
  if (a.review_status) card.append(el("p", { class: "reviews", text: a.review_status }));
  const comment = el("textarea", { rows: "2", placeholder: "Comment (optional)", "aria-label": "comment" });
  const outcome = el("p", { class: "outcome", role: "status" });
  const options = el("div", { class: "options" });
  const values = (a.options_json || []).map((o) => ({ value: o.value, label: o.label || o.value }));
  if (!values.some((o) => o.value === "reject")) values.push({ value: "reject", label: "Reject" });
  for (const o of values) {
    const isDefault = a.default_value === o.value;
    const b = el("button", { class: isDefault ? "default" : "", type: "button",
      text: o.label + (o.label.toLowerCase() === o.value.toLowerCase() ? "" : " (" + o.value + ")") + (isDefault ? " — default" : "") });
    b.addEventListener("click", () => decide(a, o.value, comment.value, outcome, card, decidePath));
    options.append(b);
  }
  card.append(options, comment, outcome);
  return card;
}

async function decide(a, value, comment, outcome, card, decidePath) {
  if (!window.confirm("Answer “" + a.question + "” with " + value + "?")) return;
  try {
    // The version this card shows: the server refuses a decision on any other (409).
    const d = await api("POST", decidePath || "/api/v1/approvals/" + encodeURIComponent(a.approval_id) + "/decide",
      { value, comment: comment || null, version: a.screen_digest || null });
    outcome.className = "outcome decided";
    // Still pending: counted, and more reviewers are needed (or a wait timer holds it).
    outcome.textContent = d.status === "pending"
      ? "Your approval is counted: " + (d.review_status || "more are needed")
      : d.status + " (" + (d.chosen_value || value) + ") by " + d.decided_by;
    for (const b of card.querySelectorAll("button")) b.disabled = true;
  } catch (e) {
    outcome.className = "outcome error";
    outcome.textContent = e.message;
  }
}

function runRow(r) {
  const status = el("td", { class: "status status-" + r.status, text: r.status });
  return el("tr", {},
    el("td", { text: r.tool_run_id }),
    el("td", { text: r.tool_name }),
    status,
    el("td", { text: r.exit_code == null ? "" : String(r.exit_code) }),
    el("td", { text: r.started_at }),
    el("td", { class: "reason", text: r.reason || "" }));
}

// A step's state as a glyph (the word is in the title, for a pointer or a screen reader).
const GLYPHS = { completed: "✓", failed: "✗", running: "▶", waiting_approval: "?", skipped: "-", cancelled: "⊘" };

// Executions whose steps are shown (toggled by their id).
const openPipelines = new Set();

function pipelineRow(p) {
  // Each node once, in the order first reached, with how often it ran and its last state.
  const nodes = new Map();
  for (const s of p.steps || []) {
    const seen = nodes.get(s.node);
    if (!seen || s.iteration >= seen.last.iteration) nodes.set(s.node, { last: s, n: (seen ? seen.n : 0) + 1 });
    else seen.n += 1;
  }
  const steps = el("td", { class: "steps" });
  for (const [node, { last, n }] of nodes) {
    steps.append(el("span", {
      class: "step status-" + last.status,
      title: node + ": " + last.status,
      text: node + (n > 1 ? "×" + n : "") + (GLYPHS[last.status] || "·"),
    }), " ");
  }
  const open = openPipelines.has(p.execution_id);
  const toggle = el("button", { type: "button", class: "link", "aria-expanded": String(open),
    title: (open ? "Hide" : "Show") + " its steps", text: (open ? "▾ " : "▸ ") + p.execution_id });
  toggle.addEventListener("click", () => {
    if (openPipelines.has(p.execution_id)) openPipelines.delete(p.execution_id);
    else openPipelines.add(p.execution_id);
    refresh();
  });
  return el("tr", { "data-execution": p.execution_id },
    el("td", {}, toggle),
    el("td", { text: p.name }),
    el("td", { class: "status status-" + p.status, text: p.status }),
    steps);
}

// One execution's steps (GET /api/v1/executions/{id}): every visit of every node, where it
// ran, its run or approval, and why it failed or what its approver said.
async function stepsRow(id) {
  const cell = el("td", { colspan: "4" });
  const row = el("tr", { class: "detail", "data-steps": id }, cell);
  let x;
  try {
    x = await api("GET", "/api/v1/executions/" + encodeURIComponent(id));
  } catch (e) {
    cell.append(el("p", { class: "error", text: "Could not load its steps: " + e.message }));
    return row;
  }
  const p = x.pipeline || {};
  if (p.reason) cell.append(el("p", { class: "reason", text: visible(p.reason) }));
  const head = el("tr", {}, ...["Step", "Pass", "Status", "Tries", "Exit", "Where", "Run / approval", "Note"]
    .map((h) => el("th", { text: h })));
  const body = el("tbody");
  for (const s of p.steps || []) {
    const r = s.run || {};
    body.append(el("tr", {},
      el("td", { text: s.node }),
      el("td", { text: String(s.iteration + 1) }),
      el("td", { class: "status status-" + s.status, text: s.status }),
      el("td", { text: String((s.attempt || 0) + 1) }),
      el("td", { text: s.exit_code == null ? "" : String(s.exit_code) }),
      el("td", { text: r.host ? visible(r.host) + (r.worker ? " (label worker)" : "") : "" }),
      el("td", { text: [r.tool_run_id, r.approval_id].filter(Boolean).join(" · ") }),
      el("td", { class: "reason", text: visible(s.reason || s.comment || "") })));
  }
  cell.append(el("table", { class: "steps-detail" }, el("thead", {}, head), body));
  return row;
}

async function refresh() {
  try {
    const [a, r, x] = await Promise.all([
      api("GET", "/api/v1/approvals?limit=200"),
      api("GET", "/api/v1/runs?limit=50"),
      api("GET", "/api/v1/executions?limit=20"),
    ]);
    $("pipelines-section").hidden = x.executions.length === 0;
    // A pipeline's own steps write no event: while one runs, look again every few seconds.
    clearTimeout(refresh.again);
    if (x.executions.some((p) => p.status === "running")) refresh.again = setTimeout(refresh, 3000);
    const rows = await Promise.all(x.executions.map(async (p) =>
      openPipelines.has(p.execution_id) ? [pipelineRow(p), await stepsRow(p.execution_id)] : [pipelineRow(p)]));
    $("pipelines").tBodies[0].replaceChildren(...rows.flat());
    const list = $("approvals");
    // Cards being decided stay (with their outcome); new ones come, answered ones go.
    const shown = new Map([...list.children].map((c) => [c.dataset.approval, c]));
    const ids = new Set(a.approvals.map((x) => x.approval_id));
    for (const [id, c] of shown) if (!ids.has(id) && !c.querySelector(".decided")) c.remove();
    for (const x of a.approvals) if (!shown.has(x.approval_id)) list.append(approvalCard(x));
    $("pending-count").textContent = "(" + a.approvals.length + ")";
    const body = $("runs").tBodies[0];
    body.replaceChildren(...r.runs.map(runRow));
    $("status").textContent = "";
    focusLinked();
  } catch (e) {
    if (e.status === 401) return logout("That token is not (or no longer) valid.");
    $("status").textContent = "Could not load: " + e.message;
  }
}

// A link to one approval (`#/approvals/AP-…`, as webhooks and chat messages send): its card
// is marked and scrolled to; one no longer pending says what became of it.
async function focusLinked() {
  const m = /^#\/approvals\/(AP-[0-9A-Za-z]+)$/.exec(location.hash);
  const note = $("linked");
  for (const c of document.querySelectorAll(".card.linked")) {
    if (!m || c.dataset.approval !== m[1]) c.classList.remove("linked");
  }
  if (!m) {
    note.textContent = "";
    return;
  }
  const card = [...document.querySelectorAll(".card")].find((c) => c.dataset.approval === m[1]);
  if (card) {
    note.textContent = "";
    if (!card.classList.contains("linked")) {
      card.classList.add("linked");
      card.scrollIntoView({ block: "start" });
    }
    return;
  }
  // Said once for this link, not at every refresh.
  if (focusLinked.told === location.hash) return;
  focusLinked.told = location.hash;
  try {
    const a = await api("GET", "/api/v1/approvals/" + encodeURIComponent(m[1]));
    note.textContent = m[1] + " is " + a.status + (a.decided_by ? " (by " + a.decided_by + ")" : "") +
      ": nothing to decide.";
  } catch (e) {
    note.textContent = m[1] + ": " + e.message;
  }
}
window.addEventListener("hashchange", () => {
  if (linkToken()) return openLink();
  if (token) focusLinked();
});

// A decision link (`#/l/TOKEN`, from `monitor link` or an e-mail): its one approval, decided
// through the link's own endpoint. A link-only link needs no login; another asks for its
// operator's token first.
function linkToken() {
  const m = /^#\/l\/(v1~[0-9A-Za-z~._@-]+)$/.exec(location.hash);
  return m ? m[1] : null;
}

async function openLink() {
  const t = linkToken();
  const note = $("link-note");
  $("link").hidden = false;
  $("app").hidden = true;
  $("login").hidden = true;
  $("link-card").replaceChildren();
  note.className = "";
  note.textContent = "Opening the link…";
  try {
    const d = await api("GET", "/api/v1/links/" + encodeURIComponent(t));
    $("login").hidden = true;
    note.textContent = "For " + d.link.operator + (d.link.link_only ? " (this link decides by itself)" : "") +
      "; it works once, until " + new Date(d.link.expires_at).toLocaleString() + ".";
    if (d.approval.status !== "pending") {
      note.textContent = d.link.approval_id + " is " + d.approval.status +
        (d.approval.decided_by ? " (by " + d.approval.decided_by + ")" : "") + ": nothing to decide.";
      return;
    }
    $("link-card").append(approvalCard(d.approval, "/api/v1/links/" + encodeURIComponent(t) + "/decide"));
  } catch (e) {
    if (e.status === 401) {
      note.textContent = "This link needs its operator's login.";
      $("login").hidden = false;
      return;
    }
    note.className = "error";
    note.textContent = e.message;
  }
}

// Server-sent events through fetch (EventSource cannot send the bearer header): any event
// refreshes the lists.
async function listen() {
  const me = (streaming = {});
  while (streaming === me && token) {
    try {
      const resp = await fetch("/api/v1/events", { headers: { Authorization: "Bearer " + token } });
      // A token revoked or expired (the stream ended with `token_ended`): log out rather
      // than ask again every two seconds.
      if (resp.status === 401) return logout("That token is not (or no longer) valid.");
      if (!resp.ok) throw new Error(resp.statusText);
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done || streaming !== me) break;
        buf += dec.decode(value, { stream: true });
        if (buf.includes("\n\n")) {
          buf = buf.slice(buf.lastIndexOf("\n\n") + 2);
          refresh();
        }
      }
    } catch (_) {
      await new Promise((res) => setTimeout(res, 2000));
    }
  }
}

function logout(why) {
  token = null;
  streaming = null;
  sessionStorage.removeItem("hr-token");
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = why || "";
}

async function start() {
  try {
    await api("GET", "/api/v1/approvals?limit=1");
  } catch (e) {
    return logout(e.status === 401 ? "That token is not valid." : e.message);
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  await refresh();
  listen();
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value.trim();
  $("token").value = "";
  sessionStorage.setItem("hr-token", token);
  if (linkToken()) return openLink();
  start();
});
$("logout").addEventListener("click", () => logout());
if (linkToken()) openLink();
else if (token) start();
