// The mirrord status page. It polls GET v1/status every second and each
// link's GET v1/links/{name}/history at the history's sampling interval, and
// updates the link cards in place. If the admin API answers 401 or 403, it
// asks for a token, keeps it in sessionStorage only and sends it as an
// Authorization header on every API call; the token is never put into the
// URL, the page or the console.

import * as fmt from './format.js';
import { Chart, niceBytes } from './chart.js';
import { PartitionTable } from './table.js';

const TOKEN_KEY = 'mirrord.admin-token';
const POLL_MS = 1000;
const RATE_WINDOW_MS = 5000; // records/s and bytes/s: over the last polls within this window

const SERIES = {
  records: { key: 'records_per_second', format: fmt.count, unit: 'records/s' },
  bytes: { key: 'bytes_per_second', format: (v) => `${fmt.bytes(v)}/s`, unit: '', round: niceBytes },
  lag: { key: 'lag_records', format: fmt.count, unit: 'records' },
};

// Which command each state allows (README, Operations: a PREPARING or
// FAILED link can be paused, a FAILED one resumed at once; a failover
// starts from MIRRORING only, the API answers 409 otherwise).
const ALLOWED = {
  pause: new Set(['PREPARING', 'MIRRORING', 'FAILED']),
  resume: new Set(['PAUSED', 'FAILED']),
  failover: new Set(['MIRRORING']),
};

const $ = (id) => document.getElementById(id);

function set(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

// ---- the API, with the operator's token ----------------------------------

class AuthError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function storedToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null; // storage disabled: the page asks again after a reload
  }
}

async function api(method, path) {
  const headers = { Accept: 'application/json' };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(path, { method, headers, cache: 'no-store', redirect: 'error' });
  const text = await res.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  const why = (body && typeof body.error === 'string') ? body.error : res.statusText;
  if (res.status === 401 || res.status === 403) throw new AuthError(res.status, why);
  if (!res.ok) throw new Error(`${res.status} ${why}`);
  return body;
}

const auth = {
  needed: false,
  form: $('token-form'),
  input: $('token-input'),
  reason: $('token-reason'),
  forget: $('forget-token'),

  // ask shows the token form after a 401 (no token) or 403 (refused).
  ask(err) {
    if (err.status === 403) {
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch { /* nothing stored */ }
    }
    this.needed = true;
    const what = err.status === 401 ? "The agent's admin API asks for a token." : 'The agent refused the token.';
    set(this.reason, err.message ? `${what} (${err.status}: ${err.message})` : what);
    this.form.hidden = false;
    this.forget.hidden = true;
    setConn('token needed', 'warn');
    if (document.activeElement !== this.input) this.input.focus();
  },

  init() {
    this.forget.hidden = !storedToken();
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      const token = this.input.value.trim();
      this.input.value = '';
      if (!token) return;
      try {
        sessionStorage.setItem(TOKEN_KEY, token);
      } catch {
        set(this.reason, 'This browser does not let the page keep the token (session storage is disabled).');
        return;
      }
      this.form.hidden = true;
      this.forget.hidden = false;
      this.needed = false;
      poll();
    });
    this.forget.addEventListener('click', () => {
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch { /* nothing stored */ }
      this.forget.hidden = true;
      poll();
    });
  },
};

function setConn(text, level) {
  const el = $('conn');
  set(el, text);
  if (el.dataset.level !== level) el.dataset.level = level;
}

// ---- one card per link -----------------------------------------------------

class LinkCard {
  // counters: the link counter table GET v1/status serves ({key, label,
  // alarm, headline, help}, in order); the card lists every counter that is
  // not a headline figure, and marks a non-zero alarm counter (the
  // README's Operations section alerts on these).
  // name: the link's; slot: the slot of a link with slots this card shows
  // (null without slots).
  constructor(name, slot, counters) {
    const frag = $('link-template').content.cloneNode(true);
    this.el = frag.querySelector('.link');
    this.el.dataset.link = cardKey(name, slot);
    this.name = name;
    this.slot = slot;
    this.f = {};
    for (const el of this.el.querySelectorAll('[data-f]')) this.f[el.dataset.f] = el;
    this.table = new PartitionTable(this.el.querySelector('.partitions'));
    this.charts = [...this.el.querySelectorAll('figure.chart')].map((fig) => new Chart(fig, SERIES[fig.dataset.series]));
    // A slot has no history to chart (history).
    for (const el of this.el.querySelectorAll('.charts, .charts-legend')) el.hidden = slot !== null;
    this.marks = []; // {at, records, bytes} of the last polls, for the rates
    this.historyDue = 0;
    this.historyBusy = false;
    this.state = '';
    this.buttons = {};
    for (const b of this.el.querySelectorAll('button[data-command]')) {
      this.buttons[b.dataset.command] = b;
      b.addEventListener('click', () => this.command(b.dataset.command));
    }
    this.counters = {};
    for (const c of counters) {
      if (c.headline) continue;
      const div = document.createElement('div');
      const dt = document.createElement('dt');
      dt.textContent = c.label;
      dt.title = c.help;
      const dd = document.createElement('dd');
      dd.dataset.counter = c.key;
      div.append(dt, dd);
      this.f.counters.append(div);
      this.counters[c.key] = { dd, div, alarm: c.alarm };
    }
  }

  update(st, atMs) {
    const f = this.f;
    set(f.name, this.slot === null ? st.name : `${st.name} (slot ${this.slot})`);
    // A hot standby says for whom it stands by (standing_by).
    set(f.state, st.standing_by ? `${st.state} · standby for ${st.standing_by}` : st.state);
    if (f.state.dataset.state !== st.state) f.state.dataset.state = st.state;
    this.state = st.state;
    if (fmt.isTime(st.since)) {
      const since = Date.parse(st.since);
      set(f.since, `since ${fmt.clock(since)} (${fmt.duration(atMs - since)})`);
      f.since.title = st.since;
    } else {
      set(f.since, '');
    }

    set(f.source, st.source);
    set(f.destination, st.destination);
    set(f['source-id'], st.source_cluster_id || '—');
    set(f['destination-id'], st.destination_cluster_id || '—');
    set(f['source-region'], region(st.source_region, st.source_region_hashed));
    set(f['destination-region'], region(st.destination_region, st.destination_region_hashed));
    set(f.epoch, fmt.int(st.session_epoch));
    set(f.delivery, st.delivery || 'preserve');

    const c = st.counters || {};
    this.marks.push({ at: atMs, records: c.records_mirrored, bytes: c.bytes_mirrored });
    while (this.marks.length > 2 && atMs - this.marks[1].at >= RATE_WINDOW_MS) this.marks.shift();
    const first = this.marks[0];
    const dt = (atMs - first.at) / 1000;
    if (dt > 0) {
      set(f.rps, fmt.count((c.records_mirrored - first.records) / dt));
      set(f.bps, fmt.bytes((c.bytes_mirrored - first.bytes) / dt));
    } else {
      set(f.rps, '—');
      set(f.bps, '—');
    }
    set(f.lag, fmt.int(st.lag_records));
    set(f['lag-time'], typeof st.lag_seconds === 'number' ? fmt.duration(st.lag_seconds * 1000) : '—');
    set(f.partitions, fmt.int(st.partitions.length));
    set(f.records, fmt.int(c.records_mirrored));
    set(f.bytes, fmt.bytes(c.bytes_mirrored));
    for (const [key, { dd, div, alarm }] of Object.entries(this.counters)) {
      const v = c[key];
      // Coalescing shows its ratio: source batches per joined batch.
      if (key === 'batches_coalesced' && v > 0) {
        set(dd, `${fmt.int(v)} (${(c.source_batches_coalesced / v).toFixed(1)} source batches each)`);
      } else {
        set(dd, fmt.int(v));
      }
      const warn = Boolean(alarm && v > 0);
      if (div.classList.contains('alarm') !== warn) div.classList.toggle('alarm', warn);
    }

    if (st.last_error) {
      f['error-box'].hidden = false;
      const at = fmt.isTime(st.last_error_at) ? Date.parse(st.last_error_at) : NaN;
      set(f['error-at'], Number.isFinite(at) ? `at ${fmt.clock(at)} (${fmt.duration(atMs - at)} ago)` : '');
      set(f.error, st.last_error);
    } else {
      f['error-box'].hidden = true;
    }

    const offered = new Set(st.commands || []);
    for (const [cmd, b] of Object.entries(this.buttons)) {
      b.hidden = !offered.has(cmd);
      b.disabled = this.busy || !(ALLOWED[cmd] || new Set()).has(st.state);
    }

    this.table.setRows(st.partitions);
    this.groups(groupRows(st.group_sync, atMs));
  }

  // groups renders one row per synced group (groupRows); the section
  // stays hidden until then. Its shape is the agent's: one column per field.
  groups(groups) {
    const box = this.f.groups;
    if (!Array.isArray(groups) || groups.length === 0) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    const keys = [...new Set(groups.flatMap((g) => Object.keys(g)))];
    const head = document.createElement('tr');
    for (const k of keys) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.textContent = k.replaceAll('_', ' ');
      head.append(th);
    }
    box.querySelector('thead').replaceChildren(head);
    box.querySelector('tbody').replaceChildren(...groups.map((g) => {
      const tr = document.createElement('tr');
      for (const k of keys) {
        const td = document.createElement('td');
        const v = g[k];
        if (typeof v === 'number') {
          td.className = 'num';
          td.textContent = fmt.int(v);
        } else {
          td.textContent = v === undefined || v === null ? '' : (typeof v === 'object' ? JSON.stringify(v) : String(v));
        }
        tr.append(td);
      }
      return tr;
    }));
  }

  // history fetches the link's samples and redraws the charts.
  // A slot has none: the agent keeps no history of a slot, which may move
  // to another agent.
  async history(ov, atMs) {
    if (this.slot !== null || this.historyBusy || atMs < this.historyDue) return;
    this.historyBusy = true;
    const intervalMs = Math.max(1000, ov.history.interval_seconds * 1000);
    this.historyDue = atMs + Math.min(30000, intervalMs);
    try {
      const h = await api('GET', `v1/links/${encodeURIComponent(this.name)}/history`);
      const windowMs = h.capacity * h.interval_seconds * 1000;
      for (const c of this.charts) c.update(h.samples, { endMs: atMs, windowMs, intervalMs: h.interval_seconds * 1000 });
    } catch (e) {
      if (e instanceof AuthError) auth.ask(e);
      this.historyDue = 0; // try again at the next poll
    } finally {
      this.historyBusy = false;
    }
  }

  // command sends an operator command; the link acts on it asynchronously,
  // and the next polls show the new state.
  async command(cmd) {
    if (cmd === 'failover' && !window.confirm(`Fail over link ${this.name}?`)) return;
    this.busy = true;
    for (const b of Object.values(this.buttons)) b.disabled = true;
    const note = this.f.notice;
    try {
      await api('POST', `v1/links/${encodeURIComponent(this.name)}/${cmd}`);
      set(note, `${cmd} sent at ${fmt.hms(Date.now())}; the link acts on it in the background.`);
      note.dataset.level = 'ok';
    } catch (e) {
      if (e instanceof AuthError) {
        auth.ask(e);
        set(note, `${cmd} not sent: the API needs a token. Send it again after entering one.`);
      } else {
        set(note, `${cmd} failed: ${e.message}`);
      }
      note.dataset.level = 'bad';
    } finally {
      note.hidden = false;
      this.busy = false;
      poll();
    }
  }
}

// cardKey names a card: the link's name, or for a slot of a link with slots
// the slot's session (`<link>.<slot>`).
function cardKey(name, slot) {
  return slot === null ? name : `${name}.${slot}`;
}

function region(r, hashed) {
  if (!r) return '—';
  return hashed ? `${r} (hashed: the cluster ID is not a UUID)` : r;
}

// ---- polling -----------------------------------------------------------------

const cards = new Map();
let timer = 0;
let inFlight = false;
let again = false;

function render(ov) {
  const t0 = performance.now();
  const main = $('links');
  const atMs = Date.parse(ov.at);
  const seen = new Set();
  for (const st of ov.links) {
    const slot = st.slot ?? null;
    const key = cardKey(st.name, slot);
    seen.add(key);
    let card = cards.get(key);
    if (!card) {
      card = new LinkCard(st.name, slot, ov.counters || []);
      cards.set(key, card);
      main.append(card.el);
    }
    card.update(st, atMs);
    card.history(ov, atMs);
  }
  for (const [key, card] of cards) {
    if (!seen.has(key)) {
      card.el.remove();
      cards.delete(key);
    }
  }
  $('no-links').hidden = ov.links.length > 0;
  set($('updated'), `updated ${fmt.hms(atMs)}`);
  const states = ov.links.map((l) => l.state);
  const worst = ['FAILED', 'PREPARING', 'STOPPED', 'PAUSED', 'MIRRORING'].find((s) => states.includes(s));
  document.title = worst ? `mirrord · ${worst}` : 'mirrord';
  main.dataset.renderMs = (performance.now() - t0).toFixed(2);
}

async function poll() {
  clearTimeout(timer);
  if (auth.needed) return;
  if (inFlight) {
    again = true;
    return;
  }
  inFlight = true;
  try {
    render(await api('GET', 'v1/status'));
    setConn('live', 'ok');
  } catch (e) {
    if (e instanceof AuthError) auth.ask(e);
    else setConn(`agent unreachable (${e.message}); retrying`, 'bad');
  } finally {
    inFlight = false;
    if (!auth.needed) timer = setTimeout(poll, again ? 0 : POLL_MS);
    again = false;
  }
}

auth.init();
poll();

// groupRows turns the link's group_sync status into the rows of the groups
// section: each group (a consumer group, or a share group) with its state, its partitions, the members it has at
// the destination (a group with members is left alone), how long ago it was
// last synced, and its error.
function groupRows(sync, atMs) {
  if (!sync || !Array.isArray(sync.groups)) return [];
  return sync.groups.map((g) => {
    const at = fmt.isTime(g.at) ? Date.parse(g.at) : NaN;
    return {
      group: g.group,
      type: g.type || 'consumer',
      state: g.state,
      partitions: Array.isArray(g.partitions) ? g.partitions.length : 0,
      destination_members: g.destination_members || 0,
      last_sync: Number.isFinite(at) ? `${fmt.duration(atMs - at)} ago` : '—',
      error: g.error || '',
    };
  });
}
