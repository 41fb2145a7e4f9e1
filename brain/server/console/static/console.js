// The Brain console: live pages, Cancel, Retry, Approve / Reject, copy buttons, a
// running step's progress (and, from logs.js, loaded first, step logs; from run_form.js,
// the workflows' run forms).
// Plain JavaScript, no build step; every page works (read-only) without it.
//
// A live page never draws a run itself: when /api/events says the run changed, it
// fetches its own page again and swaps in the parts the server marked ".live" (and the
// steps, one by one, so open steps and their log panels stay as they are). The server's
// templates are the only place a run is drawn, with or without JavaScript. A "progress"
// event only moves the figures of a bar the server drew (it comes twice a second).
"use strict";

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
      if (mine.dataset.status !== status) decisionDone(mine);
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

// "Approved: the run goes on." is true while the step still waits for its run to go on;
// once the page shows the step moved on, its Decision field (the server's) says what was
// decided, and the run's status what came of it: the notice goes. A refusal ("Not
// decided: ...") stays, as it says what became of the click.
function decisionDone(step) {
  const out = step.querySelector("output.decide-result");
  if (out && !out.classList.contains("failed")) out.textContent = "";
}

function swapButtons(root, fresh) {
  for (const button of root.querySelectorAll(".actions button[data-action]")) {
    const theirs = fresh.querySelector('.actions [data-action="' + button.dataset.action + '"]');
    if (theirs) button.hidden = theirs.hidden;
  }
}

// --- a step's progress ---------------------------------------------------------------------

// A progress figure as the server writes it (brain/server/console/usage.py): 3, 2.5, 0.33.
function figure(value) {
  return Number.isInteger(value) ? String(value) : value.toFixed(2).replace(/\.?0+$/, "");
}

function isFigure(value) {
  return typeof value === "number" && Number.isFinite(value);
}

// "3/10: copying", as usage.progress() words it.
function progressText(data) {
  let text = isFigure(data.progress) ? figure(data.progress) : "";
  if (isFigure(data.total)) text += "/" + figure(data.total);
  if (typeof data.message === "string" && data.message) {
    text = text ? text + ": " + data.message : data.message;
  }
  return text;
}

// A progress event moves the bar and words the server drew for the step; whether there
// should be a bar at all, and its first drawing, are the server's (false: ask it).
function showProgress(data) {
  const step = document.getElementById("step-" + data.step);
  const shown = step && step.querySelector(":scope > summary .progress");
  if (!shown) return false;
  const bar = shown.querySelector("progress");
  const total = isFigure(data.total) && isFigure(data.progress) && data.total > 0;
  if (!!bar !== total) return false;
  if (bar) {
    const done = Math.min(Math.max(data.progress, 0), data.total);
    bar.max = data.total;
    bar.value = done;
    bar.textContent = Math.floor(done / data.total * 100) + "%";
  }
  shown.querySelector(".progress-text").textContent = progressText(data);
  return true;
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
  // "Retry from here" on a step of an ended run (its steps are drawn again as it changes:
  // one listener on the page serves them all)
  root.addEventListener("click", (event) => {
    const button = event.target.closest('[data-action="retry-from"]');
    if (!button) return;
    const said = button.parentElement.querySelector("output") || result;
    post("/api/runs/" + runId + "/retry", {from: button.dataset.step})
      .then((data) => { window.location.href = "/runs/" + data.run_id; })
      .catch((err) => { said.textContent = err.message; });
  });
}

function livePage() {
  const root = document.querySelector(".run[data-run]");
  if (!root) return;
  const runId = root.dataset.run;
  const result = root.querySelector(".actions output");
  // (a page that no longer follows its run has drawn its end already: nothing to redraw)
  const logs = stepLogs(root, runId, () => { if (root.dataset.active === "yes") refreshRun(); });
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
  source.addEventListener("progress", (event) => {
    let data = null;
    try { data = JSON.parse(event.data); } catch (e) { return; }
    if (!showProgress(data)) soon();
  });
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
        // (the page may have shown the step go on already, before this answer came)
        const said = (data.approved ? "Approved" : "Rejected") + ": the run goes on.";
        tell(!step || step.dataset.status === "waiting" ? said : "", false);
        refreshRun();
      })
      .catch((err) => {
        tell("Not decided: " + err.message, true);
        buttons.forEach((b) => { b.disabled = false; });
        if (err.status === 409) { box.value = ""; refreshRun(); }
      });
  });
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
  copyButtons();
  livePage();
  liveRuns();
  decisionForms();
});
