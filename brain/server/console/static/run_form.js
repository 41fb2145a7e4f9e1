// The Brain console: each workflow's "Run now" form, drawn by the server from the
// workflow's parameters (brain/server/console/run_form.py): one field per parameter,
// read by its kind (text, number, checkbox, select, json). Submitting posts
// {"params": ..., "body": ...} to /api/workflows/{name}/runs and opens the new run; a 422
// puts each error beside the field its "loc" names.
"use strict";

// One field's value; undefined leaves the parameter out (its default applies).
function fieldValue(param) {
  const kind = param.dataset.kind;
  const input = param.querySelector("input, select, textarea");
  if (kind === "checkbox") return input.checked;
  const text = input.value;
  if (text.trim() === "") return undefined;  // left empty: the default (or "Field required")
  if (kind === "number") return Number(text);
  if (kind === "select") return JSON.parse(text);
  if (kind === "json") {
    try { return JSON.parse(text); } catch (e) { throw {param: param, message: "not JSON: " + e.message}; }
  }
  return text;
}

function fieldError(param, text) {
  const out = param.querySelector("output.field-error");
  out.textContent = text;
  const input = param.querySelector("input, select, textarea");
  if (text) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
}

function formResult(form, text) {
  const out = form.querySelector("output.result");
  if (out) out.textContent = text;
}

function readForm(form) {
  const params = {};
  let bad = false;
  for (const param of form.querySelectorAll(".param[data-param]")) {
    fieldError(param, "");
    try {
      const value = fieldValue(param);
      if (value !== undefined) params[param.dataset.param] = value;
    } catch (problem) {
      fieldError(param, problem.message || String(problem));
      bad = true;
    }
  }
  const request = {};
  if (form.querySelector(".param[data-param]")) request.params = params;
  const text = form.querySelector("textarea.body").value;
  if (text.trim()) {
    try { request.body = JSON.parse(text); } catch (e) { request.body = text; }
  }
  return bad ? null : request;
}

// A 422's errors beside their fields; what names no field goes under the button.
function showErrors(form, data) {
  const left = [];
  for (const error of data.errors || []) {
    const name = (error.loc || [])[0];
    const param = form.querySelector('.param[data-param="' + CSS.escape(String(name)) + '"]');
    if (!param) { left.push(error.msg); continue; }
    const path = (error.loc || []).slice(1).join(".");
    const out = param.querySelector("output.field-error");
    const text = (path ? path + ": " : "") + error.msg;
    fieldError(param, out.textContent ? out.textContent + "; " + text : text);
  }
  formResult(form, left.length ? left.join("; ") : (data.errors ? "see the fields above" : data.detail));
}

function startRun(form) {
  const request = readForm(form);
  if (request === null) { formResult(form, "see the fields above"); return; }
  formResult(form, "starting…");
  fetch("/api/workflows/" + encodeURIComponent(form.dataset.workflow) + "/runs", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(request),
  }).then(async (r) => {
    let data = {};
    try { data = await r.json(); } catch (e) { /* not JSON */ }
    if (r.status === 422) { showErrors(form, data); return; }
    if (!r.ok) { formResult(form, data.detail || ("HTTP " + r.status)); return; }
    window.location.href = "/runs/" + data.run_id;
  }).catch((err) => formResult(form, err.message));
}

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form.run-now")) {
    form.addEventListener("submit", (event) => { event.preventDefault(); startRun(form); });
  }
});
