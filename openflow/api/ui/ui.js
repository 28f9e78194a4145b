// OpenFlow pages: read and act through the API's JSON routes. Every text that comes from a run
// (model output, tool output, file contents) reaches the page through textContent or the
// Markdown renderer below, which builds DOM nodes from a whitelist and never parses HTML.
"use strict";

const KEY = "openflow.apiKey";
const body = document.body;
const main = () => document.getElementById("main");

// ---- DOM ----------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "className") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

function when(ms) {
  if (!ms) return "";
  const d = new Date(typeof ms === "number" ? ms : Date.parse(ms));
  return isNaN(d) ? "" : d.toLocaleString();
}

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch (e) {
    return String(value);
  }
}

const FOLD_CHARS = 600;

function folded(text, summary) {
  text = String(text ?? "");
  if (text.length <= FOLD_CHARS && text.split("\n").length <= 12) return el("pre", {}, text);
  const lines = text.split("\n").length;
  return el("details", { className: "fold" },
    el("summary", {}, `${summary} (${lines} lines, ${text.length} chars)`), el("pre", {}, text));
}

// ---- Markdown: a small renderer that emits only whitelisted elements -----------------------

const SAFE_URL = /^(https?:\/\/|\/|#|mailto:)/i;

function inline(text) {
  const out = [];
  const pattern = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*|_[^_\s][^_]*_)|(\[[^\]]+\]\([^)\s]+\))/;
  let rest = text;
  while (rest) {
    const m = pattern.exec(rest);
    if (!m) { out.push(rest); break; }
    if (m.index) out.push(rest.slice(0, m.index));
    const token = m[0];
    if (m[1]) out.push(el("code", {}, token.slice(1, -1)));
    else if (m[2]) out.push(el("strong", {}, inline(token.slice(2, -2))));
    else if (m[3]) out.push(el("em", {}, inline(token.slice(1, -1))));
    else {
      const close = token.indexOf("](");
      const label = token.slice(1, close);
      const href = token.slice(close + 2, -1);
      out.push(SAFE_URL.test(href)
        ? el("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, inline(label))
        : label);
    }
    rest = rest.slice(m.index + token.length);
  }
  return out;
}

function markdown(source) {
  const root = el("div", { className: "md" });
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^```/.test(line)) {
      const code = [];
      i++;
      while (i < lines.length && !/^```/.test(lines[i])) code.push(lines[i++]);
      i++;
      root.append(el("pre", {}, el("code", {}, code.join("\n"))));
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      root.append(el(`h${Math.min(heading[1].length + 2, 6)}`, {}, inline(heading[2])));
      i++;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { root.append(el("hr")); i++; continue; }
    if (/^\s*[-*+]\s+/.test(line) || /^\s*\d+[.)]\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      const item = ordered ? /^\s*\d+[.)]\s+(.*)$/ : /^\s*[-*+]\s+(.*)$/;
      while (i < lines.length && item.test(lines[i])) list.append(el("li", {}, inline(item.exec(lines[i++])[1])));
      root.append(list);
      continue;
    }
    if (/^>\s?/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^>\s?/.test(lines[i])) quoted.push(lines[i++].replace(/^>\s?/, ""));
      root.append(el("blockquote", {}, markdown(quoted.join("\n"))));
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const para = [];
    while (i < lines.length && lines[i].trim() && !/^(```|#{1,6}\s|>|\s*[-*+]\s|\s*\d+[.)]\s)/.test(lines[i])) para.push(lines[i++]);
    if (!para.length) para.push(lines[i++]);
    root.append(el("p", {}, inline(para.join(" "))));
  }
  return root;
}

// ---- The API, with the bearer key from session storage --------------------------------------

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers(extra) {
  const h = { Accept: "application/json", ...(extra || {}) };
  const key = sessionStorage.getItem(KEY);
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function api(path, options = {}) {
  const init = { method: options.method || "GET", headers: headers(options.headers) };
  if (options.json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.json);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    askForKey(sessionStorage.getItem(KEY) ? "That key was refused; enter a valid API key." : null);
    throw new ApiError(401, "an API key is needed");
  }
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const data = await response.json();
      if (data && data.error && data.error.message) message = data.error.message;
    } catch (e) { /* not JSON */ }
    throw new ApiError(response.status, message);
  }
  if (options.raw) return response;
  return response.status === 204 ? null : response.json();
}

let asking = false;

function askForKey(reason) {
  if (asking) return;
  asking = true;
  stopTimers();
  const input = el("input", { type: "password", name: "key", autocomplete: "off", required: true, id: "api-key" });
  const form = el("form", { className: "card login", onsubmit: (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, input.value.trim());
    location.reload();
  } },
  el("h2", {}, "Sign in"),
  el("p", {}, reason || "This API needs a key. It is kept in this tab only (session storage) and sent as a bearer header."),
  el("label", { for: "api-key" }, "API key"), input, el("button", { type: "submit" }, "Continue"));
  clear(main()).append(form);
  input.focus();
}

function showWho() {
  const who = document.getElementById("who");
  if (!who || !sessionStorage.getItem(KEY)) return;
  clear(who).append(el("button", { className: "link", onclick: () => {
    sessionStorage.removeItem(KEY);
    location.reload();
  } }, "Sign out"));
}

const timers = [];
function every(ms, fn) {
  const tick = async () => { try { await fn(); } catch (e) { if (!(e instanceof ApiError) || e.status !== 401) console.warn(e); } };
  tick();
  timers.push(setInterval(tick, ms));
}
function stopTimers() { while (timers.length) clearInterval(timers.pop()); }

function notice(node, text, kind) {
  clear(node).append(text);
  node.className = `notice ${kind || ""}`;
}

// ---- Acting: one card per pending pause, for the inbox and the run page ---------------------

function itemKey(item) {
  return [item.run_id, item.kind, item.node_id, item.approval_id || ""].join("\u0000");
}

function questionFields(structured) {
  const questions = Array.isArray(structured && structured.questions) ? structured.questions : [];
  return questions.map((q, n) => {
    const name = `q-${n}-${Math.random().toString(36).slice(2)}`;
    const options = (Array.isArray(q.options) ? q.options : []).map((o) => el("label", { className: "option" },
      el("input", { type: "radio", name, value: String(o.label ?? ""), "data-question": String(q.question ?? q.header ?? "") }),
      el("strong", {}, String(o.label ?? "")), o.description ? ` — ${o.description}` : ""));
    return el("fieldset", { className: "question" }, el("legend", {}, String(q.header ? `${q.header}: ` : ""), String(q.question ?? "")), options);
  });
}

function actionCard(item, onDone) {
  const run = encodeURIComponent(item.run_id);
  const result = el("div", { className: "notice", role: "status" });
  const card = el("article", { className: `card pending ${item.kind}`, "data-key": itemKey(item), "data-kind": item.kind });
  const title = el("h3", {},
    el("span", { className: `badge ${item.kind}` }, { input: "needs input", approval: "needs approval", retry: "failed" }[item.kind] || item.kind),
    " ", item.label || item.node_id,
    item.workflow_name || item.workflow_id ? el("span", { className: "muted" }, ` · ${item.workflow_name || item.workflow_id}`) : "");
  card.append(title);
  if (body.dataset.page !== "run") card.append(el("p", { className: "muted" }, el("a", { href: `/ui/runs/${run}` }, item.run_id), item.since_ms ? ` · since ${when(item.since_ms)}` : ""));

  async function send(path, json, button) {
    for (const b of card.querySelectorAll("button")) b.disabled = true;
    notice(result, "Sending…");
    try {
      const answer = await api(path, { method: "POST", json });
      if (answer && answer.accepted === false) throw new ApiError(409, "the run did not accept it");
      notice(result, `Done: ${button}.`, "ok");
      card.classList.add("answered");
      if (onDone) onDone();
    } catch (e) {
      notice(result, `Not accepted: ${e.message}`, "error");
      for (const b of card.querySelectorAll("button")) b.disabled = false;
    }
  }

  if (item.kind === "input") {
    if (item.question) card.append(el("div", { className: "question-text" }, markdown(item.question)));
    const fields = questionFields(item.structured_input);
    const text = el("textarea", { name: "answer", rows: 3, placeholder: fields.length ? "Anything to add (optional)" : "Your answer", "aria-label": "answer" });
    const form = el("form", { onsubmit: (e) => {
      e.preventDefault();
      const picked = [...form.querySelectorAll("input[type=radio]:checked")].map((r) => `${r.dataset.question}: ${r.value}`);
      const answer = [...picked, text.value.trim()].filter(Boolean).join("\n");
      if (!answer) { notice(result, "Write an answer or pick an option first.", "error"); return; }
      send(`/runs/${run}/input`, { node_id: item.node_id, text: answer }, "answered");
    } }, fields, text, el("div", { className: "buttons" }, el("button", { type: "submit", name: "answer-submit" }, "Send answer")));
    card.append(form);
  } else if (item.kind === "approval") {
    approvalForm(item, card, result, send);
  } else if (item.kind === "retry") {
    if (item.error) card.append(folded(item.error, "error"));
    const message = el("input", { type: "text", name: "message", placeholder: "Message for the retry (optional)", "aria-label": "retry message" });
    card.append(el("div", { className: "buttons" }, message,
      el("button", { type: "button", name: "retry", onclick: () => send(`/runs/${run}/retry`, { node_id: item.node_id, message: message.value || null }, "retried") }, "Retry")));
    if (item.error && item.error.startsWith("budget reached")) {
      // The run's budget holds the node: a larger one lets it go on, with no retry.
      const field = item.error.includes("tokens spent") ? "maxTokens" : "maxCostUsd";
      const amount = el("input", { type: "number", name: "budget", min: "0", step: field === "maxTokens" ? "1" : "any", placeholder: field === "maxTokens" ? "New budget in tokens" : "New budget in USD", "aria-label": "new budget" });
      card.append(el("div", { className: "buttons" }, amount,
        el("button", { type: "button", name: "raise-budget", onclick: () => {
          const value = Number(amount.value);
          if (!(value > 0)) { notice(result, "Give a positive number.", "error"); return; }
          send(`/runs/${run}/budget`, { [field]: value }, "budget raised");
        } }, "Raise budget")));
    }
  }
  card.append(result);
  card.addEventListener("input", () => { card.dataset.dirty = "1"; });
  return card;
}

// An approval: the whole batch at once, or each call on its own (allowed, denied with its own
// reason, or allowed with edited arguments), an optional "remember" grant and who decides.
const BY_KEY = "openflow.by";

function approvalForm(item, card, result, send) {
  const run = encodeURIComponent(item.run_id);
  const path = `/runs/${run}/approvals/${encodeURIComponent(item.approval_id)}`;
  const calls = item.tool_calls && item.tool_calls.length ? item.tool_calls : [item.tool_call].filter(Boolean);
  const rows = calls.map((call, n) => callRow(call, n, item.tier));
  for (const row of rows) card.append(row.node);

  const tools = [...new Set(calls.map((c) => String(c.name ?? "tool")))];
  const remember = el("input", { type: "checkbox", name: "remember" });
  const rememberTool = el("select", { name: "remember-tool", "aria-label": "tool to remember" }, tools.map((t) => el("option", { value: t }, t)));
  const rememberPrefix = el("input", { type: "text", name: "remember-prefix", placeholder: "path prefix (optional)", "aria-label": "path prefix" });
  card.append(el("div", { className: "remember" }, el("label", {}, remember, " Allow later calls of "), rememberTool, rememberPrefix, el("span", { className: "muted" }, " for the rest of this run")));

  const by = el("input", { type: "text", name: "by", placeholder: "Your name", "aria-label": "your name", maxlength: 200, value: localStorage.getItem(BY_KEY) || "" });
  const reason = el("input", { type: "text", name: "reason", placeholder: "Reason (shown to the model when denied)", "aria-label": "reason" });

  function common(json) {
    const name = by.value.trim();
    if (name) { localStorage.setItem(BY_KEY, name); json.by = name; }
    if (remember.checked) {
      json.remember = { tool: rememberTool.value };
      if (rememberPrefix.value.trim()) json.remember.path_prefix = rememberPrefix.value.trim();
    }
    return json;
  }
  function whole(allow) {
    send(path, common({ allow, reason: reason.value || null }), allow ? "approved" : "denied");
  }
  function perCall() {
    const decisions = [];
    for (const row of rows) {
      const decision = row.decision();
      if (typeof decision === "string") { notice(result, decision, "error"); return; }
      decisions.push(decision);
    }
    const allowed = decisions.filter((d) => d.allow).length;
    send(path, common({ decisions }), `${allowed} of ${decisions.length} calls approved`);
  }
  card.append(el("div", { className: "buttons" }, by, reason,
    el("button", { type: "button", name: "approve", className: "good", onclick: () => whole(true) }, "Approve all"),
    el("button", { type: "button", name: "deny", className: "bad", onclick: () => whole(false) }, "Deny all"),
    el("button", { type: "button", name: "decide", onclick: perCall }, "Send each call's decision")));
}

function callRow(call, n, tier) {
  const id = String(call.id ?? "");
  const group = `call-${n}-${Math.random().toString(36).slice(2)}`;
  const args = call.arguments ?? {};
  const original = JSON.stringify(args);
  const allow = el("input", { type: "radio", name: group, value: "allow", "data-choice": "allow", checked: true });
  const deny = el("input", { type: "radio", name: group, value: "deny", "data-choice": "deny" });
  const reason = el("input", { type: "text", name: "call-reason", placeholder: "Why this call is denied (the model sees it)", "aria-label": `reason for ${id}` });
  const edit = el("textarea", { name: "call-arguments", rows: 4, spellcheck: "false", "aria-label": `arguments of ${id}` });
  edit.value = pretty(args);
  const error = el("span", { className: "call-error" });
  const sync = () => { reason.hidden = !deny.checked; edit.disabled = deny.checked; };
  allow.addEventListener("change", sync);
  deny.addEventListener("change", sync);
  sync();
  edit.addEventListener("input", () => { error.textContent = parsedArguments(edit.value) === null ? "not a JSON object" : ""; });
  const node = el("div", { className: "tool call", "data-call-id": id },
    el("div", { className: "call-head" }, el("code", { className: "tool-name" }, String(call.name ?? "tool")),
      tier ? el("span", { className: "muted" }, ` (${tier})`) : "", " ", el("span", { className: "muted call-id" }, id),
      el("label", { className: "choice" }, allow, " allow"), el("label", { className: "choice" }, deny, " deny")),
    folded(pretty(args), "arguments"),
    el("details", { className: "edit" }, el("summary", {}, "Edit the arguments"), edit, error),
    reason);

  function decision() {
    if (deny.checked) {
      const out = { call_id: id, allow: false };
      if (reason.value.trim()) out.reason = reason.value.trim();
      return out;
    }
    const parsed = parsedArguments(edit.value);
    if (parsed === null) return `The arguments of ${id} are not a JSON object; fix them or undo the edit.`;
    const out = { call_id: id, allow: true };
    if (JSON.stringify(parsed) !== original) out.arguments = parsed;
    return out;
  }
  return { node, decision };
}

function parsedArguments(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch (e) {
    return null;
  }
}

function syncCards(container, items, onDone, empty) {
  const wanted = new Map(items.map((item) => [itemKey(item), item]));
  for (const card of [...container.querySelectorAll(":scope > article.pending")]) {
    if (wanted.has(card.dataset.key)) continue;
    if (card.classList.contains("answered")) setTimeout(() => card.remove(), 4000);
    else if (card.dataset.dirty) card.classList.add("stale"); // keep what the person wrote
    else card.remove();
  }
  const present = new Set([...container.querySelectorAll(":scope > article.pending")].map((c) => c.dataset.key));
  for (const [key, item] of wanted) if (!present.has(key)) container.append(actionCard(item, onDone));
  let placeholder = container.querySelector(":scope > .empty");
  if (!container.querySelector(":scope > article.pending")) {
    if (!placeholder) container.append(el("p", { className: "empty muted" }, empty));
  } else if (placeholder) placeholder.remove();
}

// ---- Runs ---------------------------------------------------------------------------------

const STATUSES = ["running", "paused", "completed", "failed", "stopped"];

async function runsPage() {
  const m = clear(main());
  const status = el("select", { name: "status", "aria-label": "status" }, el("option", { value: "" }, "any status"), STATUSES.map((s) => el("option", { value: s }, s)));
  const workflow = el("select", { name: "workflow", "aria-label": "workflow" }, el("option", { value: "" }, "any workflow"));
  const params = new URLSearchParams(location.search);
  status.value = params.get("status") || "";
  const table = el("tbody");
  const startBox = el("section", { className: "card start" });
  m.append(el("h1", {}, "Runs"), startBox,
    el("div", { className: "filters" }, "Show ", status, " ", workflow),
    el("table", { className: "runs" }, el("thead", {}, el("tr", {}, ["Run", "Workflow", "Status", "Waits for", "Started"].map((h) => el("th", {}, h)))), table));

  let catalog = [];
  try { catalog = await api("/workflows"); } catch (e) { if (e.status === 401) return; }
  for (const wf of catalog) workflow.append(el("option", { value: wf.id }, wf.name ? `${wf.name} (${wf.id})` : wf.id));
  workflow.value = params.get("workflow_id") || "";
  startForm(startBox, catalog);

  const refresh = async () => {
    const q = new URLSearchParams();
    if (status.value) q.set("status", status.value);
    if (workflow.value) q.set("workflow_id", workflow.value);
    const runs = await api(`/runs?${q}`);
    runs.sort((a, b) => String(b.start_time || "").localeCompare(String(a.start_time || "")));
    clear(table);
    if (!runs.length) table.append(el("tr", {}, el("td", { colspan: 5, className: "muted" }, "No runs yet.")));
    for (const r of runs) {
      table.append(el("tr", { "data-run": r.run_id },
        el("td", {}, el("a", { href: `/ui/runs/${encodeURIComponent(r.run_id)}` }, r.run_id)),
        el("td", {}, r.workflow_name || r.workflow_id),
        el("td", {}, el("span", { className: `status ${r.status}` }, r.status)),
        el("td", {}, (r.awaiting || []).join(", ")),
        el("td", {}, when(r.start_time))));
    }
  };
  const onFilter = () => {
    const q = new URLSearchParams();
    if (status.value) q.set("status", status.value);
    if (workflow.value) q.set("workflow_id", workflow.value);
    history.replaceState(null, "", `/ui${q.toString() ? "?" + q : ""}`);
    refresh();
  };
  status.addEventListener("change", onFilter);
  workflow.addEventListener("change", onFilter);
  every(2000, refresh);
}

function startForm(box, catalog) {
  const workflow = el("select", { name: "workflow_id", required: true, id: "start-workflow" }, catalog.map((wf) => el("option", { value: wf.id }, wf.name || wf.id)));
  const entry = el("textarea", { name: "entrypoint", rows: 2, id: "start-entrypoint", placeholder: "What should the run do?" });
  const project = el("input", { type: "text", name: "project_dir", id: "start-project", placeholder: "/absolute/path/to/project (optional)" });
  const result = el("div", { className: "notice", role: "status" });
  const form = el("form", { onsubmit: async (e) => {
    e.preventDefault();
    const json = { workflow_id: workflow.value };
    if (entry.value.trim()) json.entrypoint = entry.value;
    if (project.value.trim()) json.project_dir = project.value.trim();
    notice(result, "Starting…");
    try {
      const ref = await api("/runs", { method: "POST", json });
      location.href = `/ui/runs/${encodeURIComponent(ref.run_id)}`;
    } catch (err) {
      notice(result, `Not started: ${err.message}`, "error");
    }
  } },
  el("h2", {}, "Start a run"),
  catalog.length ? "" : el("p", { className: "muted" }, "The catalog is empty: save a workflow with `openflow workflows save FILE`."),
  el("div", { className: "grid" },
    el("label", { for: "start-workflow" }, "Workflow"), workflow,
    el("label", { for: "start-entrypoint" }, "Entrypoint"), entry,
    el("label", { for: "start-project" }, "Project folder"), project),
  el("div", { className: "buttons" }, el("button", { type: "submit", name: "start", disabled: !catalog.length }, "Start")), result);
  box.append(form);
}

// ---- Inbox --------------------------------------------------------------------------------

async function inboxPage() {
  const m = clear(main());
  const list = el("section", { className: "inbox" });
  m.append(el("h1", {}, "Inbox"), el("p", { className: "muted" }, "Everything your live runs wait for, newest first."), list);
  const refresh = async () => syncCards(list, await api("/inbox"), null, "Nothing waits for you.");
  every(2000, refresh);
}

// ---- One run ------------------------------------------------------------------------------

function pendingOf(state, runId) {
  if (state.active === false) return [];
  const base = { run_id: runId, workflow_id: state.workflowId || "" };
  const statuses = state.statusByNode || {};
  const items = (state.pendingApprovals || []).map((a) => ({ ...base, kind: "approval", node_id: a.nodeId, label: a.nodeLabel || a.nodeId, approval_id: a.approvalId, tool_call: a.toolCall, tool_calls: a.toolCalls || [], tier: a.tier }));
  const covered = new Set(items.map((i) => i.node_id));
  for (const node of state.awaitingNodeIds || []) {
    if (covered.has(node)) continue;
    const chat = (state.chatLogs || {})[node] || [];
    let question = null;
    for (let n = chat.length - 1; n >= 0; n--) {
      if (chat[n].role === "user") break;
      if (chat[n].role === "assistant" && String(chat[n].content || "").trim()) { question = chat[n].content; break; }
    }
    items.push({ ...base, kind: "input", node_id: node, label: node, question, structured_input: (state.structuredInputByNode || {})[node] });
  }
  for (const [node, status] of Object.entries(statuses).sort()) {
    if (status !== "failed" && status !== "interrupted") continue;
    const failed = [...(state.runTrace || [])].reverse().find((t) => t.nodeId === node && t.status === "failed");
    items.push({ ...base, kind: "retry", node_id: node, label: node, error: status === "interrupted" ? "interrupted" : (failed && failed.message) || state.lastError });
  }
  return items;
}

function depthOrder(nodes, edges) {
  const parents = new Map(nodes.map((n) => [n, []]));
  for (const e of edges) if (parents.has(e.to) && parents.has(e.from)) parents.get(e.to).push(e.from);
  const depth = new Map();
  const visit = (n, seen) => {
    if (depth.has(n)) return depth.get(n);
    if (seen.has(n)) return 0;
    seen.add(n);
    const d = Math.max(-1, ...parents.get(n).map((p) => visit(p, seen))) + 1;
    depth.set(n, d);
    return d;
  };
  nodes.forEach((n) => visit(n, new Set()));
  const columns = [];
  for (const n of nodes) (columns[depth.get(n)] ||= []).push(n);
  return columns.filter(Boolean);
}

async function runPage() {
  const runId = body.dataset.runId;
  const run = encodeURIComponent(runId);
  const m = clear(main());
  let state;
  try {
    state = await api(`/runs/${run}`);
  } catch (e) {
    if (e.status === 401) return;
    m.append(el("section", { className: "card missing" }, el("h1", {}, e.status === 404 ? "No such run" : "This run cannot be shown"),
      el("p", {}, e.message), el("p", {}, el("a", { href: "/ui" }, "← Back to all runs"))));
    return;
  }
  let workflow = null;
  if (state.workflowId) {
    try { workflow = await api(`/workflows/${encodeURIComponent(state.workflowId)}`); } catch (e) { workflow = null; }
  }
  const streams = new Map(); // message_id -> {node_id, role, text}
  const handoffCache = new Map();
  const header = el("section", { className: "run-head" });
  const graph = el("section", { className: "graph", "aria-label": "graph" });
  const pending = el("section", { className: "pending-list" });
  const usage = el("section", { className: "usage" });
  const nodesBox = el("section", { className: "nodes" });
  const suggestions = el("section", { className: "suggestions" });
  const waitingTitle = el("h2", {}, "Waiting for you");
  m.append(header, graph, waitingTitle, pending, usage, nodesBox, suggestions);

  const temporalUi = body.dataset.temporalUi;
  const controls = el("div", { className: "buttons" });
  const controlResult = el("div", { className: "notice", role: "status" });
  const statusBadge = el("span", { className: "status" });
  header.append(el("p", {}, el("a", { href: "/ui" }, "← All runs")),
    el("h1", {}, "Run ", el("code", {}, runId), " ", statusBadge),
    el("p", { className: "muted meta" }), controls, controlResult);
  const control = (label, path) => el("button", { type: "button", name: label.toLowerCase(), onclick: async () => {
    notice(controlResult, "Sending…");
    try { await api(`/runs/${run}/${path}`, { method: "POST" }); notice(controlResult, `${label} requested.`, "ok"); scheduleRefresh(); }
    catch (e) { notice(controlResult, `Not accepted: ${e.message}`, "error"); }
  } }, label);
  const stopButton = control("Stop", "stop");
  const resumeButton = control("Resume", "resume");
  controls.append(stopButton, resumeButton);
  if (temporalUi) controls.append(el("a", { className: "external", href: `${temporalUi}/namespaces/${encodeURIComponent(body.dataset.namespace || "default")}/workflows/${run}`, rel: "noopener noreferrer", target: "_blank" }, "Open in Temporal Web UI"));

  function nodeIds() {
    const ids = new Set(Object.keys(state.statusByNode || {}));
    if (workflow) for (const n of workflow.nodes || []) ids.add(n.id);
    return [...ids].sort();
  }

  function renderGraph() {
    clear(graph);
    const ids = nodeIds();
    const labels = new Map((workflow && workflow.nodes || []).map((n) => [n.id, n.label || n.name || n.id]));
    const columns = depthOrder(ids, (workflow && workflow.edges) || []);
    columns.forEach((col, n) => {
      if (n) graph.append(el("div", { className: "arrow", "aria-hidden": "true" }, "→"));
      graph.append(el("div", { className: "column" }, col.map((id) => {
        const status = (state.statusByNode || {})[id] || "idle";
        return el("a", { className: `node status ${status}`, href: `#node-${id}`, "data-node": id, "data-status": status },
          el("strong", {}, labels.get(id) || id), el("span", {}, status));
      })));
    });
  }

  function renderHead() {
    statusBadge.textContent = state.status;
    statusBadge.className = `status ${state.status}`;
    const meta = header.querySelector(".meta");
    const started = (state.runTrace || []).find((t) => t.atMs);
    clear(meta).append(`Workflow ${workflow && workflow.name ? `${workflow.name} (${state.workflowId})` : state.workflowId || "?"}`,
      started ? ` · started ${when(started.atMs)}` : "",
      state.waitingReason ? ` · ${state.waitingReason}` : "",
      state.executionCwd ? ` · folder ${state.executionCwd}` : "");
    const live = state.active !== false && ["running", "paused"].includes(state.status);
    stopButton.hidden = !live;
    resumeButton.hidden = live || state.status === "completed";
  }

  function renderUsage() {
    clear(usage);
    const rows = [];
    const u = state.usage && state.usage.run;
    const report = state.lastReport;
    if (u) rows.push(`tokens in ${u.inputTokens ?? 0} · out ${u.outputTokens ?? 0}` + (u.estimatedCostUsd != null ? ` · est. $${Number(u.estimatedCostUsd).toFixed(4)}` : ""));
    else if (report) rows.push(`tokens in ${report.tokens_in ?? 0} · out ${report.tokens_out ?? 0}` + (report.estimated_cost_usd != null ? ` · est. $${Number(report.estimated_cost_usd).toFixed(4)}` : ""));
    if (rows.length) usage.append(el("h2", {}, "Usage"), el("p", {}, rows.join(" · ")));
    clear(suggestions);
    const list = (report && report.suggestions) || [];
    if (list.length) {
      suggestions.append(el("h2", {}, "Suggestions"), el("ul", {}, list.map((s) => el("li", {}, el("strong", {}, s.title), ` (${s.category}${s.target_node_id ? `, ${s.target_node_id}` : ""}): `, s.recommendation, el("div", { className: "muted" }, s.evidence)))));
    }
  }

  const artifactsBox = el("section", { className: "artifacts" });
  suggestions.after(artifactsBox);
  const traceBox = el("details", { className: "trace card" }, el("summary", {}, "Trace"), el("ol"));
  artifactsBox.after(traceBox);
  function renderTrace() {
    const list = traceBox.querySelector("ol");
    const entries = state.runTrace || [];
    if (list.childElementCount === entries.length) return;
    clear(list).append(...entries.map((t) => el("li", {}, el("span", { className: `status ${t.status}` }, t.status), " ",
      t.nodeLabel || t.nodeId || "run", ": ", t.message, t.atMs ? el("span", { className: "muted" }, ` · ${when(t.atMs)}`) : "")));
  }

  // Remembered approvals: each grant with who made it, and a button that takes it back.
  const grantsBox = el("section", { className: "grants" });
  usage.after(grantsBox);
  function renderGrants() {
    const grants = state.grants || [];
    const key = JSON.stringify(grants);
    if (grantsBox.dataset.key === key) return;
    clear(grantsBox).dataset.key = key;
    if (!grants.length) return;
    const result = el("div", { className: "notice", role: "status" });
    grantsBox.append(el("h2", {}, "Remembered approvals"), el("ul", {}, grants.map((g) => {
      const json = { tool: g.tool };
      if (g.pathPrefix != null) json.path_prefix = g.pathPrefix;
      const revoke = el("button", { type: "button", name: "revoke", onclick: async () => {
        notice(result, "Sending…");
        try { await api(`/runs/${run}/grants/revoke`, { method: "POST", json }); notice(result, "Revoked.", "ok"); scheduleRefresh(); }
        catch (e) { notice(result, `Not accepted: ${e.message}`, "error"); }
      } }, "Revoke");
      return el("li", { className: "grant", "data-tool": g.tool },
        el("code", {}, g.tool), g.pathPrefix != null ? [" under ", el("code", {}, g.pathPrefix)] : "",
        " runs without asking", g.by ? el("span", { className: "muted" }, ` · by ${g.by}`) : "",
        g.atMs ? el("span", { className: "muted" }, ` · ${when(g.atMs)}`) : "", " ", revoke);
    })), result);
  }

  function renderArtifacts() {
    const list = Object.values(state.toolArtifacts || {});
    if (artifactsBox.childElementCount && artifactsBox.dataset.count === String(list.length)) return;
    clear(artifactsBox).dataset.count = String(list.length);
    if (!list.length) return;
    artifactsBox.append(el("h2", {}, "Spilled tool output"), el("ul", {}, list.map((a) => {
      const view = el("div");
      return el("li", {}, el("code", {}, a.path || a.artifactId), ` from ${a.toolName}, ${a.sizeBytes} bytes `,
        el("button", { type: "button", className: "small", onclick: async (e) => {
          e.target.disabled = true;
          try {
            const response = await api(`/runs/${run}/artifacts/${encodeURIComponent(a.artifactId)}`, { raw: true });
            clear(view).append(folded(await response.text(), "artifact"));
          } catch (err) { clear(view).append(`not readable: ${err.message}`); }
        } }, "Show"), view);
    })));
  }

  function renderHandoff(box, node) {
    const ref = (state.handoffs || {})[node];
    if (!ref) return;
    const key = `${node}:${ref.sha256 || JSON.stringify(ref)}`;
    const existing = box.querySelector(":scope > .handoff");
    if (existing && existing.dataset.key === key) return;
    if (existing) existing.remove();
    const target = el("div", { className: "handoff", "data-key": key }, el("h4", {}, "Handoff"));
    box.insertBefore(target, box.querySelector(".conversation"));
    const show = (content) => { target.append(content); };
    if (handoffCache.has(key)) { show(handoffCache.get(key).cloneNode(true)); return; }
    api(`/runs/${run}/handoffs/${encodeURIComponent(node)}`, { raw: true }).then(async (response) => {
      const text = await response.text();
      let node = (response.headers.get("content-type") || "").includes("json")
        ? el("pre", { className: "json" }, (() => { try { return pretty(JSON.parse(text)); } catch (e) { return text; } })())
        : markdown(text);
      handoffCache.set(key, node.cloneNode(true));
      show(node);
    }).catch((e) => show(el("p", { className: "muted" }, `not readable: ${e.message}`)));
  }

  function renderNodes() {
    for (const id of nodeIds()) {
      let box = nodesBox.querySelector(`:scope > [data-node="${CSS.escape(id)}"]`);
      if (!box) {
        const text = el("input", { type: "text", name: "message", placeholder: "Message this node", "aria-label": `message ${id}` });
        const result = el("div", { className: "notice", role: "status" });
        box = el("article", { className: "card node-detail", "data-node": id, id: `node-${id}` },
          el("h3", {}), el("div", { className: "conversation" }),
          el("form", { className: "message", onsubmit: async (e) => {
            e.preventDefault();
            if (!text.value.trim()) return;
            try { await api(`/runs/${run}/messages`, { method: "POST", json: { node_id: id, text: text.value } }); text.value = ""; notice(result, "Sent.", "ok"); }
            catch (err) { notice(result, `Not accepted: ${err.message}`, "error"); }
          } }, text, el("button", { type: "submit" }, "Send")), result);
        nodesBox.append(box);
      }
      const status = (state.statusByNode || {})[id] || "idle";
      clear(box.querySelector("h3")).append(id, " ", el("span", { className: `status ${status}` }, status));
      box.querySelector("form.message").hidden = state.active === false || ["completed", "failed", "stopped"].includes(state.status);
      const conv = clear(box.querySelector(".conversation"));
      const tools = new Map(((state.toolCallsByNode || {})[id] || []).map((t) => [t.toolCallId, t]));
      const shown = new Set();
      const toolBlock = (t) => el("div", { className: `msg toolcall ${t.isError ? "error" : ""}`, "data-call": t.toolCallId },
        el("span", { className: "role" }, "tool call"),
        el("div", {}, el("code", {}, t.toolName), " ", el("span", { className: `status ${t.status}` }, t.status), t.intent ? el("span", { className: "muted" }, ` — ${t.intent}`) : ""),
        folded(pretty(t.arguments || {}), "arguments"),
        t.lastOutput != null ? folded(t.lastOutput, "output") : "");
      const streamBlock = (mid, s) => el("div", { className: `msg ${s.role}${s.done ? "" : " streaming"}`, "data-stream": mid },
        el("span", { className: "role" }, s.role), el("div", { className: "text" }, s.text));
      const logs = (state.chatLogs || {})[id] || [];
      const nodeStreams = [...streams].filter(([, s]) => s.node_id === id);
      logs.forEach((msg, n) => {
        for (const [mid, s] of nodeStreams) if (s.at === n) conv.append(streamBlock(mid, s));
        const call = msg.toolCallId && tools.get(msg.toolCallId);
        if (call && !shown.has(msg.toolCallId)) { shown.add(msg.toolCallId); conv.append(toolBlock(call)); }
        if (call && (msg.role === "tool" || msg.role === "thinking")) return;
        if (!String(msg.content || "").trim()) return;
        conv.append(el("div", { className: `msg ${msg.role}` }, el("span", { className: "role" }, msg.role), el("div", { className: "text" }, msg.content)));
      });
      for (const [mid, s] of nodeStreams) if (s.at >= logs.length) conv.append(streamBlock(mid, s));
      for (const [callId, t] of tools) if (!shown.has(callId)) conv.append(toolBlock(t));
      renderHandoff(box, id);
    }
  }

  function render() {
    renderHead();
    renderGraph();
    const waiting = pendingOf(state, runId);
    if (state.active === false) for (const card of pending.querySelectorAll("article.pending")) card.remove();
    syncCards(pending, waiting, scheduleRefresh, "Nothing waits for you on this run.");
    waitingTitle.hidden = pending.hidden = !waiting.length && !pending.querySelector("article.pending");
    renderUsage();
    renderGrants();
    renderNodes();
    renderArtifacts();
    renderTrace();
  }

  let refreshTimer = null;
  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      try {
        state = await api(`/runs/${run}`);
        for (const [mid, s] of streams) {
          // A streamed reply gives way to the message it became; text the run keeps nowhere else stays.
          const kept = ((state.chatLogs || {})[s.node_id] || []).some((m) => m.role === s.role && String(m.content || "").trim() === s.text.trim());
          if (s.done && kept) streams.delete(mid);
        }
        render();
      } catch (e) { console.warn(e); }
    }, 150);
  }

  function onDelta(d) {
    if (!d || d.type !== "ChatMessageDelta") return;
    let s = streams.get(d.message_id);
    if (!s) {
      s = { node_id: d.node_id, role: d.role || "assistant", text: "", at: ((state.chatLogs || {})[d.node_id] || []).length };
      streams.set(d.message_id, s);
    }
    if (d.delta) s.text += d.delta;
    body.dataset.liveDeltas = String(Number(body.dataset.liveDeltas || 0) + 1);
    if (d.finalize) { s.done = true; scheduleRefresh(); }
    const box = nodesBox.querySelector(`:scope > [data-node="${CSS.escape(d.node_id)}"] .conversation`);
    if (!box) return;
    let bubble = box.querySelector(`[data-stream="${CSS.escape(d.message_id)}"] .text`);
    if (!bubble) {
      const wrap = el("div", { className: `msg ${s.role} streaming`, "data-stream": d.message_id }, el("span", { className: "role" }, s.role), el("div", { className: "text" }));
      box.append(wrap);
      bubble = wrap.querySelector(".text");
    }
    bubble.textContent = s.text;
    bubble.parentNode.classList.toggle("streaming", !s.done);
  }

  render();
  follow(run, scheduleRefresh, onDelta);
  every(5000, async () => { if (state.active !== false) scheduleRefresh(); });
}

// Server-Sent Events over fetch (EventSource cannot send the bearer header): resumes with
// Last-Event-ID for durable events and live_after for deltas, so nothing shows twice.
async function follow(run, onEvent, onDelta) {
  let lastId = 0;
  let liveAfter = 0;
  for (;;) {
    let ended = false;
    try {
      const h = headers({ Accept: "text/event-stream" });
      if (lastId) h["Last-Event-ID"] = String(lastId);
      const response = await fetch(`/runs/${run}/events?live_after=${liveAfter}`, { headers: h });
      if (!response.ok || !response.body) throw new Error(`stream answered ${response.status}`);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const message = { data: [] };
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) { if (line.includes("end of run")) ended = true; continue; }
            const at = line.indexOf(":");
            const name = at < 0 ? line : line.slice(0, at);
            const val = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
            if (name === "data") message.data.push(val);
            else message[name] = val;
          }
          if (!message.data.length) continue;
          let data;
          try { data = JSON.parse(message.data.join("\n")); } catch (e) { continue; }
          if (message.event === "delta") {
            const seq = Number(data.live_seq || 0);
            if (seq && seq <= liveAfter) continue;
            if (seq) liveAfter = seq;
            onDelta(data);
          } else if (message.event === "error") {
            ended = true;
          } else if (message.id) {
            const id = Number(message.id);
            if (id <= lastId) continue;
            lastId = id;
            body.dataset.lastEventId = String(id);
            body.dataset.events = String(Number(body.dataset.events || 0) + 1);
            onEvent(data);
          }
        }
      }
    } catch (e) {
      console.warn("event stream lost; reconnecting", e);
    }
    body.dataset.streams = String(Number(body.dataset.streams || 0) + 1);
    onEvent(null);
    if (ended) return;
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ---- Start --------------------------------------------------------------------------------

window.openflowMarkdown = markdown;
document.addEventListener("DOMContentLoaded", () => {
  showWho();
  const page = { runs: runsPage, inbox: inboxPage, run: runPage }[body.dataset.page];
  if (page) page().catch((e) => { if (!(e instanceof ApiError && e.status === 401)) notice(main(), `Something went wrong: ${e.message}`, "error"); });
});
