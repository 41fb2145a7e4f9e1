// The Brain console: live updates from /api/events, Run now, Cancel, Retry, copy buttons.
// Plain JavaScript, no build step; every page works (read-only) without it.
"use strict";

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

function setStatus(el, status) {
  if (!el) return;
  for (const c of Array.from(el.classList)) if (c.startsWith("st-")) el.classList.remove(c);
  el.classList.add("st-" + status);
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

function showField(details, name, value) {
  const field = details.querySelector('[data-field="' + name + '"]');
  if (!field) return;
  const pres = field.querySelectorAll("pre");
  if (value === null || value === undefined || (value === "" && name !== "output")) {
    field.hidden = true;
    return;
  }
  field.hidden = false;
  if (pres.length === 1) pres[0].textContent = value;
  else if (pres.length > 1) { pres[pres.length - 1].textContent = value; }
}

function livePage() {
  const root = document.querySelector(".run[data-run]");
  if (!root) return;
  const runId = root.dataset.run;
  const cancel = root.querySelector('[data-action="cancel"]');
  const retry = root.querySelector('[data-action="retry"]');
  const result = root.querySelector(".actions output");
  cancel.addEventListener("click", () => {
    post("/api/runs/" + runId + "/cancel").then(() => { result.textContent = "cancel requested"; })
      .catch((err) => { result.textContent = err.message; });
  });
  retry.addEventListener("click", () => {
    post("/api/runs/" + runId + "/retry").then((data) => { window.location.href = "/runs/" + data.run_id; })
      .catch((err) => { result.textContent = err.message; });
  });
  if (root.dataset.active !== "yes") return;
  let pending = null;
  let source = null;
  const refresh = () => {
    pending = null;
    fetch("/api/runs/" + runId, {credentials: "same-origin"}).then((r) => r.json()).then((run) => {
      const status = document.getElementById("run-status");
      status.textContent = run.status;
      setStatus(status, run.status);
      const error = document.getElementById("run-error");
      error.hidden = !run.error;
      error.textContent = run.error || "";
      const done = ["succeeded", "failed", "cancelled"].includes(run.status);
      cancel.hidden = done;
      retry.hidden = !(run.status === "failed" || run.status === "cancelled");
      if (run.steps.some((step) => !document.getElementById("step-" + step.name))) {
        window.location.reload();  // a for_each block expanded: draw its instances
        return;
      }
      for (const step of run.steps) {
        const details = document.getElementById("step-" + step.name);
        if (details) {
          const badge = details.querySelector("summary .status");
          badge.textContent = step.status;
          setStatus(badge, step.status);
          details.querySelector("summary .tries").textContent = "tries " + step.tries;
          if (step.started_at && step.ended_at) {
            const took = (Date.parse(step.ended_at) - Date.parse(step.started_at)) / 1000;
            details.querySelector("summary .took").textContent = took.toFixed(2) + "s";
          }
          showField(details, "output", step.output);
          showField(details, "error", step.error);
          showField(details, "stderr", step.stderr);
          if (step.status === "failed") details.open = true;
        }
        for (const node of document.querySelectorAll('[data-step="' + CSS.escape(step.name) + '"]')) {
          if (!node.classList.contains("step")) setStatus(node, step.status);
        }
      }
      if (done && source) { source.close(); root.dataset.active = "no"; }
    }).catch(() => {});
  };
  const soon = () => { if (!pending) pending = setTimeout(refresh, 150); };
  source = new EventSource("/api/events?run_id=" + runId);
  source.addEventListener("step", soon);
  source.addEventListener("run", soon);
  // Once listening (and after every reconnect), catch up on what happened before.
  source.addEventListener("open", soon);
}

function liveRuns() {
  const table = document.querySelector("table.runs[data-live='runs']");
  if (!table) return;
  const workflow = table.dataset.workflow;
  const source = new EventSource("/api/events" + (workflow ? "?workflow=" + encodeURIComponent(workflow) : ""));
  let reload = null;
  source.addEventListener("run", (event) => {
    const data = JSON.parse(event.data);
    const row = table.querySelector('tr[data-run="' + data.run_id + '"]');
    if (row) {
      const badge = row.querySelector(".status");
      badge.textContent = data.status;
      setStatus(badge, data.status);
      row.querySelector(".error").textContent = (data.error || "").slice(0, 160);
    } else if (!reload && !window.location.search.includes("page=") ) {
      reload = setTimeout(() => window.location.reload(), 800);
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  runNowForms();
  copyButtons();
  livePage();
  liveRuns();
});
