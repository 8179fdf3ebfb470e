// A line chart of one series of a link's history over a fixed time window,
// drawn into an inline SVG that the page's template holds. The SVG stretches
// to its box (preserveAspectRatio="none"); the axis labels are HTML, so that
// they stay crisp at any width.

import { hms } from './format.js';

const W = 600; // the SVG's viewBox
const H = 150;

// nice rounds up to 1, 2 or 5 times a power of ten, for the y axis.
export function nice(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) {
    if (v <= m * p * (1 + 1e-9)) return m * p;
  }
  return 10 * p;
}

// niceBytes rounds up the same way within the binary unit of v: 500 KiB,
// not 488.3 KiB.
export function niceBytes(v) {
  if (!(v > 0)) return 1;
  let unit = 1;
  while (v / unit >= 1024) unit *= 1024;
  return nice(v / unit) * unit;
}

export class Chart {
  // figure is a clone of the template's chart figure; key is the sample's
  // field; format turns a value into text; unit follows it in the readout;
  // round picks the top of the y axis.
  constructor(figure, { key, format, unit, round = nice }) {
    this.key = key;
    this.round = round;
    this.format = format;
    this.unit = unit;
    this.svg = figure.querySelector('svg');
    this.ns = this.svg.namespaceURI;
    this.line = figure.querySelector('.line');
    this.area = figure.querySelector('.area');
    this.states = figure.querySelector('.states');
    this.cursor = figure.querySelector('.cursor');
    this.latest = figure.querySelector('.latest');
    this.readout = figure.querySelector('.readout');
    this.ymax = figure.querySelector('.ymax');
    this.ymid = figure.querySelector('.ymid');
    this.xstart = figure.querySelector('.xstart');
    this.xmid = figure.querySelector('.xmid');
    this.samples = [];
    this.svg.addEventListener('pointermove', (e) => this.hover(e));
    this.svg.addEventListener('pointerleave', () => this.hover(null));
  }

  // update draws samples (oldest first, each with at, state and the key)
  // over the window that ends at endMs and lasts windowMs; intervalMs is the
  // sampling interval (a longer gap between two samples breaks the line).
  update(samples, { endMs, windowMs, intervalMs }) {
    this.samples = samples;
    this.endMs = endMs;
    this.windowMs = windowMs;
    const start = endMs - windowMs;
    const pts = [];
    let max = 0;
    for (const s of samples) {
      const t = Date.parse(s.at);
      if (t < start) continue;
      const v = s[this.key];
      max = Math.max(max, v);
      pts.push({ t, v, state: s.state });
    }
    const top = this.round(max);
    this.top = top;
    const x = (t) => ((t - start) / windowMs) * W;
    const y = (v) => H - (v / top) * (H - 4);

    let line = '';
    let area = '';
    let seg = [];
    const flush = () => {
      if (seg.length === 0) return;
      line += 'M' + seg.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join('L');
      area += `M${seg[0][0].toFixed(1)},${H}` + seg.map(([px, py]) => `L${px.toFixed(1)},${py.toFixed(1)}`).join('') +
        `L${seg[seg.length - 1][0].toFixed(1)},${H}Z`;
      seg = [];
    };
    for (let i = 0; i < pts.length; i++) {
      if (i > 0 && pts[i].t - pts[i - 1].t > 2.5 * intervalMs) flush();
      seg.push([x(pts[i].t), y(pts[i].v)]);
    }
    flush();
    this.line.setAttribute('d', line);
    this.area.setAttribute('d', area);

    // A bar along the bottom for every run of samples that were not
    // MIRRORING, coloured by state.
    const runs = [];
    for (const p of pts) {
      const last = runs[runs.length - 1];
      if (last && last.state === p.state && p.t - last.to <= 2.5 * intervalMs) {
        last.to = p.t;
      } else {
        runs.push({ state: p.state, from: p.t, to: p.t });
      }
    }
    const rects = runs.filter((r) => r.state !== 'MIRRORING').map((r) => {
      const el = document.createElementNS(this.ns, 'rect');
      const x0 = x(r.from - intervalMs);
      el.setAttribute('x', Math.max(0, x0).toFixed(1));
      el.setAttribute('y', String(H - 8));
      el.setAttribute('width', Math.max(1, x(r.to) - Math.max(0, x0)).toFixed(1));
      el.setAttribute('height', '8');
      el.setAttribute('class', 'st st-' + r.state);
      const title = document.createElementNS(this.ns, 'title');
      title.textContent = `${r.state} ${hms(r.from)}–${hms(r.to)}`;
      el.append(title);
      return el;
    });
    this.states.replaceChildren(...rects);

    this.ymax.textContent = this.format(top);
    this.ymid.textContent = this.format(top / 2);
    const minutes = Math.round(windowMs / 60000);
    this.xstart.textContent = minutes >= 1 ? `−${minutes} min` : `−${Math.round(windowMs / 1000)} s`;
    this.xmid.textContent = minutes >= 2 ? `−${Math.round(minutes / 2)} min` : `−${Math.round(windowMs / 2000)} s`;
    const last = pts[pts.length - 1];
    this.latest.textContent = last ? `${this.withUnit(last.v)}` : '—';
    if (!this.hovering) this.readout.textContent = last ? `${hms(last.t)} ${this.withUnit(last.v)}` : 'no samples yet';
  }

  withUnit(v) {
    return this.unit ? `${this.format(v)} ${this.unit}` : this.format(v);
  }

  // hover shows the sample nearest to the pointer, or the latest one.
  hover(e) {
    const pts = this.samples;
    if (!e || pts.length === 0) {
      this.hovering = false;
      this.cursor.setAttribute('visibility', 'hidden');
      const last = pts[pts.length - 1];
      this.readout.textContent = last ? `${hms(Date.parse(last.at))} ${this.withUnit(last[this.key])}` : 'no samples yet';
      return;
    }
    this.hovering = true;
    const box = this.svg.getBoundingClientRect();
    const t = this.endMs - this.windowMs + ((e.clientX - box.left) / box.width) * this.windowMs;
    let lo = 0;
    let hi = pts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (Date.parse(pts[mid].at) < t) lo = mid + 1;
      else hi = mid;
    }
    if (lo > 0 && Math.abs(Date.parse(pts[lo - 1].at) - t) < Math.abs(Date.parse(pts[lo].at) - t)) lo--;
    const s = pts[lo];
    const st = Date.parse(s.at);
    const px = ((st - (this.endMs - this.windowMs)) / this.windowMs) * W;
    this.cursor.setAttribute('x1', px.toFixed(1));
    this.cursor.setAttribute('x2', px.toFixed(1));
    this.cursor.setAttribute('visibility', 'visible');
    this.readout.textContent = `${hms(st)} ${this.withUnit(s[this.key])} (${s.state})`;
  }
}
