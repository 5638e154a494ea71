// A small hand-drawn canvas line chart, shared by the gateway-wide charts
// (stats.js) and one project's charts (history.js). Colours come from the
// stylesheet's --chart-* variables.

export const HISTORY_MS = 5 * 60 * 1000;
const MIN_SPAN_MS = 60 * 1000;

// The smallest of 1, 2, 2.5, 5 × 10^n at or above v.
function niceCeiling(v) {
  const exp = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * exp) return m * exp;
  return 10 * exp;
}

// Drops samples ({ t, ... }, t from performance.now()) older than the
// history kept.
export function trim(samples, now) {
  while (samples.length && samples[0].t < now - HISTORY_MS) samples.shift();
}

// A filled line chart of samples[*][key] from 0 to a round maximum (at
// least minTop); the time axis grows with the history from one minute to
// five.
export function drawChart(canvas, samples, key, fmt, minTop) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(canvas.clientWidth * dpr));
  const h = Math.max(1, Math.round(canvas.clientHeight * dpr));
  if (canvas.width !== w || canvas.height !== h) {
    canvas.width = w;
    canvas.height = h;
  }
  const ctx = canvas.getContext("2d");
  const css = getComputedStyle(canvas);
  const color = (name) => css.getPropertyValue(name).trim();
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const cw = w / dpr;
  const ch = h / dpr;
  ctx.clearRect(0, 0, cw, ch);

  let top = minTop;
  for (const p of samples) top = Math.max(top, p[key]);
  top = niceCeiling(top);
  const pad = 4;
  const plotH = ch - 14 - pad;
  const now = performance.now();
  const oldest = samples.length ? samples[0].t : now;
  const span = Math.min(HISTORY_MS, Math.max(MIN_SPAN_MS, now - oldest));
  const x = (t) => pad + ((t - (now - span)) / span) * (cw - pad * 2);
  const y = (v) => pad + plotH - (v / top) * plotH;

  ctx.strokeStyle = color("--chart-grid");
  ctx.lineWidth = 1;
  for (let i = 0; i <= 2; i++) {
    const gy = Math.round(pad + (plotH * i) / 2) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad, gy);
    ctx.lineTo(cw - pad, gy);
    ctx.stroke();
  }
  ctx.fillStyle = color("--chart-text");
  ctx.font = "10px system-ui, sans-serif";
  ctx.textBaseline = "top";
  ctx.textAlign = "left";
  ctx.fillText(fmt(top), pad + 2, 6);
  ctx.textBaseline = "bottom";
  ctx.fillText(Math.round(span / 60000) + " min ago", pad, ch);
  ctx.textAlign = "right";
  ctx.fillText("now", cw - pad, ch);

  if (samples.length < 2) return;
  ctx.beginPath();
  samples.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p.t), y(p[key])) : ctx.lineTo(x(p.t), y(p[key]))));
  ctx.strokeStyle = color("--chart-line");
  ctx.lineWidth = 1.5;
  ctx.stroke();
  ctx.lineTo(x(samples[samples.length - 1].t), y(0));
  ctx.lineTo(x(samples[0].t), y(0));
  ctx.closePath();
  ctx.fillStyle = color("--chart-fill");
  ctx.fill();
}
