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
//
// Two things tell of a step's end: its log (the stream's "end", or a read that finds it
// ended) and the page (redrawn from the server when the run's events say so). They come
// apart: the log's end may come seconds before the page hears of it, and a page drawn a
// moment ago may show a step ended that has run again since (a later try, after its
// executor was lost). So the panel says "ended" only when both agree: its lines are all
// in and the page shows the step ended. Until the page does, the panel asks it to redraw
// (onEnd), and when the page shows the step running again, the panel follows it again.
class LogPanel {
  constructor(details, runId, following, onEnd) {
    const section = details.querySelector("section.log");
    this.url = "/api/runs/" + runId + "/steps/" + encodeURIComponent(details.dataset.step) + "/log";
    this.pre = section.querySelector("pre.lines");
    this.stateEl = section.querySelector(".log-state");
    this.following = following;  // the panels of the page that hold a stream open
    this.onEnd = onEnd;          // asks the page to redraw (it shows the step's status)
    this.status = "";            // the step's status as the page shows it
    this.endedAs = "";           // the status the log ended with
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

  // Called when the panel is opened or the page was redrawn (status: as the page shows it).
  update(status) {
    this.status = status;
    if (this.done && !ENDED.includes(status)) {
      this.done = false;  // it runs again (a later try), or the log was ahead: look again
    }
    if (this.done) { this.settle(); return; }
    if (this.source || this.timer || this.busy || this.broken) return;
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
    this.load().then((data) => {
      this.busy = false;
      // The page's drawing was older than the log: the step has not ended after all.
      if (ENDED.includes(data.status)) this.ended(data.status); else this.update(data.status);
    }).catch((err) => { this.busy = false; this.broken = true; this.say(err.message); });
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

  // The log says the step has ended (and every line of it is shown).
  ended(status) {
    this.stop();
    this.done = true;
    this.endedAs = status || "";
    if (!ENDED.includes(this.status)) this.onEnd();  // the page has not heard of it yet
    this.settle();
  }

  // "ended" once the page shows the step ended too; until then the panel says what it said.
  settle() {
    if (!ENDED.includes(this.status)) return;
    const status = ENDED.includes(this.endedAs) ? this.endedAs : this.status;
    this.say(this.pre.childElementCount ? "ended (" + status + ")" : "no lines");
  }

  stop() {
    if (this.source) this.source.close();
    this.following.delete(this);
    clearTimeout(this.timer);
    this.source = null;
    this.timer = null;
  }
}

// The log panels of a run page: live while their step is open, closed with it. onEnd asks
// the page to redraw (a step's log ended before the page showed the step's end).
function stepLogs(root, runId, onEnd) {
  const panels = new Map();
  const following = new Set();
  const update = (details) => {
    const name = details.dataset.step;
    let panel = panels.get(name);
    if (!details.open) { if (panel) panel.stop(); return; }
    if (!panel) { panel = new LogPanel(details, runId, following, onEnd); panels.set(name, panel); }
    panel.update(details.dataset.status);
  };
  // "toggle" does not bubble: listen on the way down.
  root.addEventListener("toggle", (event) => {
    if (event.target.matches("details.step")) update(event.target);
  }, true);
  return {sync: () => { for (const details of root.querySelectorAll("details.step")) update(details); }};
}
