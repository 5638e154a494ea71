// Per-project history, computed here from successive polls of
// /v1/projects: events per second (deltas of last_seq), cost and restarts
// over the last minutes, drawn as three small charts in the project's
// detail (#project-charts).

import { drawChart, trim } from "./chart.js";
import { $, setText, isNum, fmtCost, fmtRate } from "./util.js";

// project → { prev: { t, seq } | null, samples: [{ t, eps, cost, restarts }] }
const projects = new Map();
let shown = null; // the project whose charts are drawn

function numberOr(value, fallback) {
  return isNum(value) ? value : fallback;
}

// Records one /v1/projects list (every project, running or not).
export function recordProjects(list) {
  const now = performance.now();
  const seen = new Set();
  for (const p of list) {
    if (!p || typeof p.project !== "string") continue;
    seen.add(p.project);
    let h = projects.get(p.project);
    if (!h) {
      h = { prev: null, samples: [] };
      projects.set(p.project, h);
    }
    const seq = numberOr(p.last_seq, h.prev ? h.prev.seq : 0);
    let eps = 0;
    if (h.prev) {
      const dt = (now - h.prev.t) / 1000;
      const delta = seq - h.prev.seq;
      // seq only grows while the gateway runs; a drop is a new gateway.
      eps = dt > 0 && delta > 0 ? delta / dt : 0;
    }
    h.prev = { t: now, seq };
    const cost = numberOr(p.cost_usd, 0);
    h.samples.push({ t: now, eps, cost, restarts: numberOr(p.restarts, 0) });
    trim(h.samples, now);
  }
  for (const name of projects.keys()) if (!seen.has(name)) projects.delete(name);
  drawProjectCharts();
}

export function resetHistory() {
  projects.clear();
}

// Shows `project`'s charts (null: none).
export function showProjectCharts(project) {
  shown = project;
  drawProjectCharts();
}

export function drawProjectCharts() {
  const box = $("project-charts");
  if (!shown || box.offsetParent === null) return;
  const h = projects.get(shown);
  const samples = h ? h.samples : [];
  const last = samples[samples.length - 1];
  setText($("pchart-events-now"), last ? fmtRate(last.eps) + " /s" : "–");
  setText($("pchart-cost-now"), last ? fmtCost(last.cost) : "–");
  setText($("pchart-restarts-now"), last ? String(last.restarts) : "–");
  drawChart($("pchart-events"), samples, "eps", fmtRate, 1);
  drawChart($("pchart-cost"), samples, "cost", fmtCost, 0.01);
  drawChart($("pchart-restarts"), samples, "restarts", (n) => String(Math.round(n)), 1);
}
