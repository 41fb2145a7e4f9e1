// The Brain console: live pages, Run now, Cancel, Retry, Approve / Reject, copy buttons and
// step logs.
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
// panels of running steps (and any whose stream is refused, by a proxy say) ask for
// new lines every few seconds instead.
const MAX_FOLLOWING = 3;
const POLL_MS = 2000;
const MAX_LINES = 5000;
// Redraws the run page now (a live page swaps its parts in; any other page reloads).
let refreshRun = () => window.location.reload();

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
    const theirs = fresh.getElementById(mine.id);
    if (theirs && mine.className !== theirs.className) mine.className = theirs.className;
    swapInner(mine, theirs);
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
      if (!typing(mine, theirs)) {
        swapInner(mine.querySelector(":scope > .fields"), theirs.querySelector(":scope > .fields"));
      }
      const status = theirs.dataset.status;
      if ((status === "failed" || status === "waiting") && mine.dataset.status !== status) mine.open = true;
      mine.dataset.status = theirs.dataset.status;
    }
    before = mine;
  }
}

// Whether someone is writing a comment in this step's decision form, which the server still
// draws (so swapping the step's fields in would throw their words away).
function typing(mine, theirs) {
  const box = mine.querySelector("form.decide textarea");
  return !!box && !!theirs.querySelector("form.decide") &&
    (box.value !== "" || document.activeElement === box);
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
  refreshRun = soon;
  source.addEventListener("step", soon);
  source.addEventListener("run", soon);
  // Once listening (and after every reconnect), catch up on what happened before.
  source.addEventListener("open", soon);
  // Running bars grow with time even when no step changes: redraw every few seconds
  // while a step runs, now and then otherwise (a run that waits for hours).
  let ticks = 0;
  clock = setInterval(() => {
    ticks += 1;
    if (root.querySelector('details.step[data-status="running"]') || ticks % 5 === 0) soon();
  }, 3000);
}

// --- Approve / Reject ---------------------------------------------------------------------

// A decision form posts to the console's own route (stored by "console"); the answer is
// said under the step, and the page is redrawn either way (a 409 means someone else
// decided, or the wait ended: the page then shows how).
function decisionForms() {
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form.decide");
    // (without the button that was pressed, the browser posts the form itself)
    if (!form || !event.submitter) return;
    event.preventDefault();
    const step = form.closest("details.step");
    const out = step ? step.querySelector("output.decide-result") : null;
    const box = form.querySelector("textarea");
    const approve = event.submitter.value;
    const buttons = form.querySelectorAll("button");
    const tell = (text, failed) => {
      if (!out) return;
      out.textContent = text;
      out.classList.toggle("failed", failed);
    };
    buttons.forEach((b) => { b.disabled = true; });
    tell("deciding…", false);
    fetch(form.action, {method: "POST", credentials: "same-origin", headers: {Accept: "application/json"},
                        body: new URLSearchParams({approve: approve, comment: box.value})})
      .then(async (r) => {
        let data = {};
        try { data = await r.json(); } catch (e) { /* not JSON */ }
        if (!r.ok) throw Object.assign(new Error(data.detail || ("HTTP " + r.status)), {status: r.status});
        return data;
      })
      .then((data) => {
        box.value = "";
        tell((data.approved ? "Approved" : "Rejected") + ": the run goes on.", false);
        refreshRun();
      })
      .catch((err) => {
        tell("Not decided: " + err.message, true);
        buttons.forEach((b) => { b.disabled = false; });
        if (err.status === 409) { box.value = ""; refreshRun(); }
      });
  });
}

// --- step logs -----------------------------------------------------------------------------

// The log panel of one step (docs/logs.md): the stored lines of an ended step, fetched
// once; the lines of a running step as they come, from its ?follow=true stream.
class LogPanel {
  constructor(details, runId, following) {
    const section = details.querySelector("section.log");
    this.url = "/api/runs/" + runId + "/steps/" + encodeURIComponent(details.dataset.step) + "/log";
    this.pre = section.querySelector("pre.lines");
    this.stateEl = section.querySelector(".log-state");
    this.following = following;  // the panels of the page that hold a stream open
    this.next = 0;               // the seq of the last line shown
    this.source = null;
    this.timer = null;
    this.busy = false;
    this.done = false;           // every line is shown (the step has ended)
    this.broken = false;
    this.stick = true;           // follow the end
    this.note = "";
    // Scrolling up stops following the end; back at the bottom, it follows again.
    this.pre.addEventListener("scroll", () => {
      this.stick = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 8;
      this.say(this.note);
    });
  }

  say(note) {
    this.note = note;
    const live = this.source || this.timer;
    this.stateEl.textContent = live && !this.stick ? note + " · scroll to the end to follow" : note;
  }

  // Called when the panel is opened or its step changed status.
  update(status) {
    if (this.source || this.timer || this.busy || this.done || this.broken) return;
    if (status === "pending" || status === "queued") this.say("not started yet");
    else if (status === "waiting") this.say("waiting: no lines until it goes on");
    else if (ENDED.includes(status)) this.loadOnce();
    else if (this.following.size < MAX_FOLLOWING) this.follow();
    else this.poll();
  }

  append(lines) {
    const chunk = document.createDocumentFragment();
    for (const line of lines) {
      if (line.seq <= this.next) continue;  // already shown (a reconnect sends them again)
      this.next = line.seq;
      const span = document.createElement("span");
      span.className = "ln " + line.stream;
      span.title = line.stream + ", +" + Number(line.t || 0).toFixed(2) + " s";
      span.textContent = line.text + "\n";
      chunk.appendChild(span);
    }
    const pre = this.pre;
    pre.appendChild(chunk);
    while (pre.childElementCount > MAX_LINES) pre.firstElementChild.remove();
    pre.hidden = pre.childElementCount === 0;
    if (this.stick) pre.scrollTop = pre.scrollHeight;
  }

  load() {
    return fetch(this.url + "?after=" + this.next, {credentials: "same-origin"})
      .then((r) => {
        if (!r.ok) throw new Error(r.status === 404 ? "no log here" : "log: HTTP " + r.status);
        return r.json();
      })
      .then((data) => { this.append(data.lines || []); return data; });
  }

  loadOnce() {
    this.busy = true;
    this.say("loading…");
    this.load().then((data) => this.ended(data.status))
      .catch((err) => { this.broken = true; this.say(err.message); })
      .finally(() => { this.busy = false; });
  }

  follow() {
    const source = new EventSource(this.url + "?follow=true&after=" + this.next);
    this.source = source;
    this.following.add(this);
    this.say("connecting…");
    source.addEventListener("open", () => this.say("live"));
    source.addEventListener("log", (event) => this.append(JSON.parse(event.data).lines || []));
    source.addEventListener("end", (event) => this.ended(JSON.parse(event.data).status));
    source.addEventListener("error", () => {
      if (this.source !== source) return;
      if (source.readyState !== EventSource.CLOSED) { this.say("reconnecting…"); return; }
      this.stop();  // refused (by a proxy, say): ask every few seconds instead
      this.poll();
    });
  }

  poll() {
    this.say("live (every " + POLL_MS / 1000 + " s)");
    this.timer = setTimeout(() => {
      this.load().then((data) => {
        if (!this.timer) return;  // closed meanwhile
        if (ENDED.includes(data.status)) this.ended(data.status); else this.poll();
      }).catch((err) => { this.stop(); this.broken = true; this.say(err.message); });
    }, POLL_MS);
  }

  ended(status) {
    this.stop();
    this.done = true;
    this.say(this.pre.childElementCount ? "ended" + (status ? " (" + status + ")" : "") : "no lines");
  }

  stop() {
    if (this.source) this.source.close();
    this.following.delete(this);
    clearTimeout(this.timer);
    this.source = null;
    this.timer = null;
  }
}

// The log panels of a run page: live while their step is open, closed with it.
function stepLogs(root, runId) {
  const panels = new Map();
  const following = new Set();
  const update = (details) => {
    const name = details.dataset.step;
    let panel = panels.get(name);
    if (!details.open) { if (panel) panel.stop(); return; }
    if (!panel) { panel = new LogPanel(details, runId, following); panels.set(name, panel); }
    panel.update(details.dataset.status);
  };
  // "toggle" does not bubble: listen on the way down.
  root.addEventListener("toggle", (event) => {
    if (event.target.matches("details.step")) update(event.target);
  }, true);
  return {sync: () => { for (const details of root.querySelectorAll("details.step")) update(details); }};
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
  decisionForms();
});
