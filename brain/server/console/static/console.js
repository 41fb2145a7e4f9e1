// The Brain console: live pages, Run now, Cancel, Retry, copy buttons and step logs.
// Plain JavaScript, no build step; every page works (read-only) without it.
//
// A live page never draws a run itself: when /api/events says the run changed, it
// fetches its own page again and swaps in the parts the server marked ".live" (and the
// steps, one by one, so open steps and their log panels stay as they are). The server's
// templates are the only place a run is drawn, with or without JavaScript.
"use strict";

const ENDED = ["succeeded", "failed", "cancelled", "skipped"];
// A browser opens at most 6 connections to one server: the page's event stream and at
// most this many followed logs leave room for the page's own fetches. Further open
// panels of running steps ask for new lines every few seconds instead.
const MAX_FOLLOWING = 3;
const POLL_MS = 2000;
const MAX_LINES = 5000;

function post(url, body) {
  const options = {method: "POST", credentials: "same-origin", headers: {}};
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  return fetch(url, options).then(async (r) => {
    let data = {};
    try { data = await r.json(); } catch (e) { /* not JSON */ }
    if (!r.ok) throw new Error(data.detail || ("HTTP " + r.status));
    return data;
  });
}

function say(form, text) {
  const out = form.querySelector("output.result");
  if (out) out.textContent = text;
}

function runNowForms() {
  for (const form of document.querySelectorAll("form.run-now")) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = form.querySelector("textarea").value;
      let body = text;
      if (text.trim()) { try { body = JSON.parse(text); } catch (e) { body = text; } }
      say(form, "starting…");
      post("/api/workflows/" + encodeURIComponent(form.dataset.workflow) + "/runs",
           text.trim() ? {body: body} : {})
        .then((data) => { window.location.href = "/runs/" + data.run_id; })
        .catch((err) => say(form, err.message));
    });
  }
}

function copyButtons() {
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.copy");
    if (!button) return;
    const field = button.closest(".field");
    const pre = field.querySelector("pre.full") || field.querySelector("pre");
    navigator.clipboard.writeText(pre.textContent).then(
      () => { button.textContent = "copied"; setTimeout(() => { button.textContent = "copy"; }, 1500); },
      () => { button.textContent = "select and copy"; });
  });
}

// --- the page again, swapped in ------------------------------------------------------------

function fetchPage() {
  return fetch(window.location.pathname + window.location.search,
               {credentials: "same-origin", headers: {Accept: "text/html"}})
    .then((r) => { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
    .then((html) => new DOMParser().parseFromString(html, "text/html"));
}

function swapInner(mine, theirs) {
  if (mine && theirs && mine.innerHTML !== theirs.innerHTML) mine.innerHTML = theirs.innerHTML;
}

function swapLive(fresh) {
  for (const mine of document.querySelectorAll(".live[id]")) {
    swapInner(mine, fresh.getElementById(mine.id));
  }
}

// Each step's summary and fields are swapped; its log panel and whether it is open stay.
// New steps (a for_each block's instances, name[3]) are put where the server has them.
function swapSteps(fresh) {
  const list = document.getElementById("steps");
  let before = null;
  for (const theirs of fresh.querySelectorAll("#steps > details.step")) {
    let mine = document.getElementById(theirs.id);
    if (!mine) {
      mine = document.importNode(theirs, true);
      if (before) before.after(mine); else list.prepend(mine);
    } else {
      swapInner(mine.querySelector(":scope > summary"), theirs.querySelector(":scope > summary"));
      swapInner(mine.querySelector(":scope > .fields"), theirs.querySelector(":scope > .fields"));
      if (theirs.dataset.status === "failed" && mine.dataset.status !== "failed") mine.open = true;
      mine.dataset.status = theirs.dataset.status;
    }
    before = mine;
  }
}

function swapButtons(root, fresh) {
  for (const button of root.querySelectorAll(".actions button[data-action]")) {
    const theirs = fresh.querySelector('.actions [data-action="' + button.dataset.action + '"]');
    if (theirs) button.hidden = theirs.hidden;
  }
}

// --- a run ---------------------------------------------------------------------------------

function runButtons(root, runId, result) {
  const cancel = root.querySelector('[data-action="cancel"]');
  cancel.addEventListener("click", () => {
    cancel.disabled = true;
    post("/api/runs/" + runId + "/cancel")
      .then(() => { result.textContent = "cancel requested"; })
      .catch((err) => { cancel.disabled = false; result.textContent = err.message; });
  });
  root.querySelector('[data-action="retry"]').addEventListener("click", () => {
    post("/api/runs/" + runId + "/retry").then((data) => { window.location.href = "/runs/" + data.run_id; })
      .catch((err) => { result.textContent = err.message; });
  });
}

function livePage() {
  const root = document.querySelector(".run[data-run]");
  if (!root) return;
  const runId = root.dataset.run;
  const result = root.querySelector(".actions output");
  const logs = stepLogs(root, runId);
  runButtons(root, runId, result);
  logs.sync();
  if (root.dataset.active !== "yes") return;
  const source = new EventSource("/api/events?run_id=" + runId);
  let timer = null, busy = false, again = false, clock = null;
  const soon = () => { if (!timer) timer = setTimeout(refresh, 200); };
  const refresh = () => {
    timer = null;
    if (busy) { again = true; return; }
    busy = true;
    fetchPage().then((fresh) => {
      swapLive(fresh);
      swapSteps(fresh);
      swapButtons(root, fresh);
      logs.sync();
      if (fresh.querySelector(".run[data-run]").dataset.active !== "yes") {
        source.close();
        clearInterval(clock);
        root.dataset.active = "no";
        result.textContent = "";  // a cancel asked for has happened: the status says so
      }
    }).catch(() => { /* the next event or tick tries again */ })
      .finally(() => { busy = false; if (again) { again = false; soon(); } });
  };
  source.addEventListener("step", soon);
  source.addEventListener("run", soon);
  // Once listening (and after every reconnect), catch up on what happened before.
  source.addEventListener("open", soon);
  // Running bars grow with time even when no step changes.
  clock = setInterval(soon, 10000);
}

// --- step logs -----------------------------------------------------------------------------

function newPanel(details, runId) {
  const section = details.querySelector("section.log");
  const panel = {
    url: "/api/runs/" + runId + "/steps/" + encodeURIComponent(details.dataset.step) + "/log",
    pre: section.querySelector("pre.lines"), state: section.querySelector(".log-state"),
    next: 0, source: null, timer: null, busy: false, complete: false, broken: false,
    stick: true, note: "",
  };
  // Follow the end while the reader is at it; scrolling up stops following, back down resumes.
  panel.pre.addEventListener("scroll", () => {
    const pre = panel.pre;
    panel.stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    setState(panel, panel.note);
  });
  return panel;
}

function setState(panel, note) {
  panel.note = note;
  const live = panel.source || panel.timer;
  panel.state.textContent = live && !panel.stick ? note + " · scroll to the end to follow" : note;
}

function appendLines(panel, lines) {
  const chunk = document.createDocumentFragment();
  for (const line of lines) {
    if (line.seq <= panel.next) continue;  // already shown (a reconnect sends them again)
    panel.next = line.seq;
    const span = document.createElement("span");
    span.className = "ln " + line.stream;
    span.title = line.stream + ", +" + Number(line.t || 0).toFixed(2) + " s";
    span.textContent = line.text + "\n";
    chunk.appendChild(span);
  }
  const pre = panel.pre;
  pre.appendChild(chunk);
  while (pre.childElementCount > MAX_LINES) pre.firstElementChild.remove();
  pre.hidden = pre.childElementCount === 0;
  if (panel.stick) pre.scrollTop = pre.scrollHeight;
}

function loadLines(panel) {
  return fetch(panel.url + "?after=" + panel.next, {credentials: "same-origin"})
    .then((r) => {
      if (!r.ok) throw new Error(r.status === 404 ? "no log here" : "log: HTTP " + r.status);
      return r.json();
    })
    .then((data) => { appendLines(panel, data.lines || []); return data; });
}

function stepLogs(root, runId) {
  const panels = new Map();
  const following = new Set();

  const stop = (panel) => {
    if (panel.source) panel.source.close();
    following.delete(panel);
    clearTimeout(panel.timer);
    panel.source = null;
    panel.timer = null;
  };
  const ended = (panel, status) => {
    stop(panel);
    panel.complete = true;
    setState(panel, panel.pre.childElementCount ? "ended" + (status ? " (" + status + ")" : "") : "no lines");
  };
  const follow = (panel) => {
    const source = new EventSource(panel.url + "?follow=true&after=" + panel.next);
    panel.source = source;
    following.add(panel);
    setState(panel, "connecting…");
    source.addEventListener("open", () => setState(panel, "live"));
    source.addEventListener("log", (event) => appendLines(panel, JSON.parse(event.data).lines || []));
    source.addEventListener("end", (event) => ended(panel, JSON.parse(event.data).status));
    source.addEventListener("error", () => {
      if (panel.source !== source) return;
      if (source.readyState === EventSource.CLOSED) {  // refused (no such log): give up
        stop(panel);
        panel.broken = true;
        setState(panel, "no log here");
      } else {
        setState(panel, "reconnecting…");
      }
    });
  };
  const poll = (panel) => {
    setState(panel, "live (every " + POLL_MS / 1000 + " s)");
    panel.timer = setTimeout(() => {
      loadLines(panel).then((data) => {
        if (!panel.timer) return;  // closed meanwhile
        if (ENDED.includes(data.status)) ended(panel, data.status); else poll(panel);
      }).catch((err) => { stop(panel); panel.broken = true; setState(panel, err.message); });
    }, POLL_MS);
  };
  const loadOnce = (panel) => {
    panel.busy = true;
    setState(panel, "loading…");
    loadLines(panel).then((data) => ended(panel, data.status))
      .catch((err) => { panel.broken = true; setState(panel, err.message); })
      .finally(() => { panel.busy = false; });
  };
  const update = (details) => {
    const name = details.dataset.step;
    let panel = panels.get(name);
    if (!details.open) { if (panel) stop(panel); return; }
    if (!panel) { panel = newPanel(details, runId); panels.set(name, panel); }
    if (panel.source || panel.timer || panel.busy || panel.complete || panel.broken) return;
    const status = details.dataset.status;
    if (status === "pending" || status === "queued") setState(panel, "not started yet");
    else if (ENDED.includes(status)) loadOnce(panel);
    else if (following.size < MAX_FOLLOWING) follow(panel);
    else poll(panel);
  };
  const sync = () => { for (const details of root.querySelectorAll("details.step")) update(details); };
  // "toggle" does not bubble: listen on the way down.
  root.addEventListener("toggle", (event) => {
    if (event.target.matches("details.step")) update(event.target);
  }, true);
  return {sync};
}

// --- the runs list -------------------------------------------------------------------------

function liveRuns() {
  const table = document.querySelector("table.runs[data-live='runs']");
  if (!table) return;
  const workflow = table.dataset.workflow;
  const source = new EventSource("/api/events" + (workflow ? "?workflow=" + encodeURIComponent(workflow) : ""));
  let timer = null;
  source.addEventListener("run", () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; fetchPage().then(swapLive).catch(() => {}); }, 500);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  runNowForms();
  copyButtons();
  livePage();
  liveRuns();
});
