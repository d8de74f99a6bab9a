// The job page's HTML, styles and script: one self-contained document (job_page.hpp).
#include "launcher/health/job_page.hpp"

namespace ddp::launcher {

const std::string& JobPage::html() {
  static const std::string kPage = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ddplaunch job</title>
<style>
  :root { --ok: #1a7f37; --bad: #cf222e; --warn: #bf8700; --info: #0969da; --muted: #57606a;
          --line: #d0d7de; --bg: #f6f8fa; }
  body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
         color: #1f2328; background: #fff; }
  header { display: flex; gap: 1.5em; align-items: baseline; flex-wrap: wrap;
           padding: 12px 20px; border-bottom: 1px solid var(--line); background: var(--bg); }
  header h1 { font-size: 18px; margin: 0; }
  main { padding: 8px 20px 20px; }
  h2 { font-size: 15px; margin: 18px 0 6px; }
  .badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff;
           font-weight: 600; font-size: 12px; background: var(--muted); }
  .HEALTHY, .RUNNING, .SUCCEEDED { background: var(--ok); }
  .FAILED, .UNKILLABLE, .DONE-failed { background: var(--bad); }
  .STOPPING, .RENDEZVOUS, .STOPPED, .EXITING { background: var(--warn); }
  .muted { color: var(--muted); }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
           vertical-align: top; }
  th { font-weight: 600; background: var(--bg); }
  pre { margin: 2px 0; padding: 6px 8px; background: var(--bg); border-radius: 4px;
        font: 12px/1.35 ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre-wrap;
        max-height: 16em; overflow: auto; }
  .progress { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre; }
  #nodes { display: flex; gap: 8px; flex-wrap: wrap; }
  .node { border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; }
  .node.here { border-color: var(--info); box-shadow: 0 0 0 1px var(--info); }
  #timeline { position: relative; height: 46px; border: 1px solid var(--line);
              border-radius: 6px; background: var(--bg); margin-top: 4px; overflow: hidden; }
  #timeline .mark { position: absolute; top: 8px; height: 30px; min-width: 3px;
                    border-radius: 3px; opacity: .85; }
  #timeline .restart { background: var(--bad); }
  #timeline .reform { background: var(--warn); }
  #timeline .recovery { background: var(--info); }
  #timeline .hang { background: #8250df; top: 2px; height: 42px; width: 2px; min-width: 2px; }
  #timeline .now { position: absolute; right: 4px; top: 2px; font-size: 11px; }
  #timeline .start { position: absolute; left: 4px; top: 2px; font-size: 11px; }
  .legend span { margin-right: 1em; } .legend i { display: inline-block; width: 10px;
           height: 10px; border-radius: 2px; margin-right: 4px; vertical-align: -1px; }
  #status.lost { color: var(--bad); font-weight: 600; }
</style>
</head>
<body>
<header>
  <h1>ddplaunch job <span id="run-id" class="muted"></span></h1>
  <span>agent <span id="job-state" class="badge">…</span></span>
  <span>round <b id="round">-</b></span>
  <span>restarts <b id="restarts">-</b></span>
  <span>in-place recoveries <b id="recoveries">-</b></span>
  <span id="status" class="muted" data-updates="0">connecting…</span>
</header>
<main>
  <h2>Nodes</h2>
  <div id="nodes"></div>

  <h2>Ranks on this node</h2>
  <table id="workers">
    <thead><tr><th>rank</th><th>local</th><th>pid</th><th>state</th><th>progress</th>
      <th>last lines</th></tr></thead>
    <tbody></tbody>
  </table>

  <h2>Timeline</h2>
  <div class="legend muted"><span><i style="background:var(--bad)"></i>restart</span>
    <span><i style="background:var(--warn)"></i>re-form</span>
    <span><i style="background:var(--info)"></i>in-place recovery</span>
    <span><i style="background:#8250df"></i>hang</span></div>
  <div id="timeline"></div>
  <table id="events">
    <thead><tr><th>when</th><th>what</th><th>rounds</th><th>cause</th><th>phase times</th>
      </tr></thead>
    <tbody></tbody>
  </table>

  <h2>Hangs</h2>
  <div id="hangs"><span class="muted">none</span></div>

  <h2>Root cause</h2>
  <div id="root-cause"><span class="muted">no failure</span></div>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
function clock(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleTimeString([], {hour12: false}) : "-";
}
function ms(seconds) { return Math.round(seconds * 1000) + " ms"; }
function state(text, extra) { return el("span", {class: "badge " + text + (extra || "")}, text); }

function drawNodes(job) {
  const box = $("nodes");
  box.replaceChildren();
  const count = Math.max(1, job.node.group_world_size);
  for (let n = 0; n < count; ++n) {
    const here = n === job.node.group_rank;
    box.append(el("div", {class: "node" + (here ? " here" : ""), "data-node": n},
                  "node " + n + (here ? " (this one: " + job.host + ", " + job.workers.length +
                  " ranks)" : "")));
  }
  box.append(el("span", {class: "muted"}, "world size " + job.node.world_size));
}

function drawWorkers(job) {
  const body = $("workers").tBodies[0];
  body.replaceChildren();
  for (const w of job.workers) {
    const end = w.state === "RUNNING" ? "" :
        " (" + (w.signal ? "signal " + w.signal : "exit " + w.exit_code) + ")";
    body.append(el("tr", {"data-rank": w.rank, "data-state": w.state},
                   el("td", {}, w.rank), el("td", {}, w.local_rank), el("td", {}, w.pid),
                   el("td", {}, state(w.state), end),
                   el("td", {class: "progress"}, w.progress || ""),
                   el("td", {}, el("pre", {}, (w.lines || []).slice(-6).join("\n")))));
  }
}

function drawTimeline(job) {
  const line = $("timeline");
  line.replaceChildren();
  const start = job.started || job.now;
  const span = Math.max(1, job.now - start);
  const at = (t) => Math.min(100, Math.max(0, (t - start) / span * 100));
  for (const item of job.timeline) {
    const seconds = item.kind === "recovery" ? Math.max(0, item.phases_ms.first_step) / 1000
                                             : item.phases.total;
    const mark = el("div", {class: "mark " + item.kind, "data-kind": item.kind,
                            title: item.kind + " round " + item.from_round + " -> " + item.round});
    mark.style.left = at(item.time) + "%";
    mark.style.width = Math.max(0.3, seconds / span * 100) + "%";
    line.append(mark);
  }
  for (const hang of job.hangs) {
    const mark = el("div", {class: "mark hang", title: hang.report});
    mark.style.left = at(hang.time) + "%";
    line.append(mark);
  }
  line.append(el("span", {class: "start muted"}, clock(start)),
              el("span", {class: "now muted"}, clock(job.now)));

  const body = $("events").tBodies[0];
  body.replaceChildren();
  const items = [...job.timeline].sort((a, b) => a.time - b.time);
  for (const item of items) {
    let what, cause, phases;
    if (item.kind === "recovery") {
      what = "in-place recovery";
      cause = item.reason + " (" + item.kept + " kept, " + item.restarted + " restarted" +
              (item.step >= 0 ? ", resumed at step " + item.step : "") + ")";
      phases = ["aborted", "reformed", "state_sent", "first_step"]
          .map((p) => p + " " + (item.phases_ms[p] < 0 ? "-" : item.phases_ms[p] + " ms"))
          .join(", ");
    } else {
      what = item.kind === "restart" ? "restart" : "re-form";
      cause = item.cause + (item.rank >= 0 ? " (rank " + item.rank + ")" : "");
      phases = ["stopping", "rendezvous", "starting", "total"]
          .map((p) => p + " " + ms(item.phases[p])).join(", ");
    }
    body.append(el("tr", {"data-kind": item.kind},
                   el("td", {}, clock(item.time)), el("td", {}, what),
                   el("td", {}, item.from_round + " → " + item.round), el("td", {}, cause),
                   el("td", {class: "phases"}, phases)));
  }
  if (!items.length) {
    body.append(el("tr", {}, el("td", {colspan: 5, class: "muted"}, "no restart yet")));
  }
}

function stackOf(job, round, rank) {
  const cause = job.root_causes.find((c) => c.round === round && c.rank === rank);
  if (cause && cause.traceback) return cause.traceback;
  const worker = job.workers.find((w) => w.rank === rank && round === job.round);
  return worker ? (worker.lines || []).join("\n") : "";
}

function drawHangs(job) {
  const box = $("hangs");
  box.replaceChildren();
  if (!job.hangs.length) { box.append(el("span", {class: "muted"}, "none")); return; }
  for (const hang of [...job.hangs].reverse()) {
    box.append(el("div", {class: "hang-entry", "data-rank": hang.rank},
                  el("b", {}, clock(hang.time) + " rank " + hang.rank +
                     (hang.culprit ? " (culprit)" : " (waiting on the culprit)")),
                  " ", hang.report || hang.scope,
                  hang.culprit ? el("pre", {class: "stack"}, stackOf(job, hang.round, hang.rank))
                               : ""));
  }
}

function drawRootCause(job) {
  const box = $("root-cause");
  box.replaceChildren();
  if (!job.root_causes.length) { box.append(el("span", {class: "muted"}, "no failure")); return; }
  const cause = job.root_causes[job.root_causes.length - 1];
  box.append(el("div", {"data-rank": cause.rank},
                el("b", {}, clock(cause.time) + " rank " + cause.rank +
                   (cause.node !== undefined ? " on node " + cause.node : "") +
                   ": exit " + cause.exit_code + (cause.signal ? " (" + cause.signal + ")" : "")),
                cause.restarted ? " (round " + cause.round + "; the group was restarted)" : "",
                el("div", {class: "message"}, cause.message || ""),
                cause.hang ? el("div", {class: "muted"}, "hang: " + cause.hang) : "",
                cause.traceback ? el("pre", {}, cause.traceback) : ""));
  if (job.root_causes.length > 1) {
    box.append(el("div", {class: "muted"},
                  (job.root_causes.length - 1) + " earlier failed attempt(s)"));
  }
}

let updates = 0;
async function refresh() {
  try {
    const reply = await fetch("/job.json", {cache: "no-store"});
    const job = await reply.json();
    $("run-id").textContent = job.run_id;
    const badge = $("job-state");
    badge.textContent = job.state;
    badge.className = "badge " + job.state + (job.exit_code ? "-failed" : "");
    $("round").textContent = job.round;
    $("restarts").textContent = job.restarts + " of " + job.max_restarts;
    $("recoveries").textContent = job.in_place_recoveries;
    drawNodes(job);
    drawWorkers(job);
    drawTimeline(job);
    drawHangs(job);
    drawRootCause(job);
    const status = $("status");
    status.className = "muted";
    status.dataset.updates = ++updates;
    status.textContent = "updated " + clock(job.now);
  } catch (error) {
    const status = $("status");
    status.className = "lost";
    status.textContent = "no answer from the agent (" + error.message + ")";
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
)HTML";
  return kPage;
}

}  // namespace ddp::launcher
