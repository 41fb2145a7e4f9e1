// The Brain console: the log panel of each step of a run page (docs/logs.md), used by
// console.js (loaded after this file). Plain JavaScript, no build step.
"use strict";

const ENDED = ["succeeded", "failed", "cancelled", "skipped"];
// A browser opens at most 6 connections to one server: the page's event stream and at
// most this many followed logs leave room for the page's own fetches. Further open
// panels of running steps (and any whose stream is refused, by a proxy say) ask for
// new lines every few seconds instead.
const MAX_FOLLOWING = 3;
const POLL_MS = 2000;
const MAX_LINES = 5000;

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
