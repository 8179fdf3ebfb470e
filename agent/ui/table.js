// The partition table of a link: sortable by every column, filtered by
// topic, and paged, so that a link with thousands of partitions renders only
// one page of rows. The rows of a page are created once and their cells
// rewritten in place when the figures change.

import { int, duration } from './format.js';

export const COLUMNS = [
  { key: 'source_topic', label: 'source topic', text: true },
  { key: 'partition', label: 'partition' },
  { key: 'destination_topic', label: 'destination topic', text: true },
  { key: 'source_next_offset', label: 'source next offset' },
  { key: 'source_high_watermark', label: 'source high watermark' },
  { key: 'lag_records', label: 'lag (records)' },
  { key: 'lag_seconds', label: 'lag (time)', time: true },
  { key: 'destination_next_offset', label: 'destination next offset' },
  { key: 'checkpoint_source_offset', label: 'checkpoint source' },
  { key: 'checkpoint_destination_offset', label: 'checkpoint destination' },
];

const PAGE_SIZES = [25, 50, 100, 250];

const UNKNOWN_BEFORE_FETCH = new Set(['source_high_watermark', 'lag_records']);

// lagSeconds is a row's lag_seconds, absent (-1, below every known value)
// until the link has fetched the partition.
const lagSeconds = (r) => (typeof r.lag_seconds === 'number' ? r.lag_seconds : -1);

// cellText is what a row shows in column c.
function cellText(r, c, unknown) {
  if (c.text) return r[c.key];
  if (c.time) return lagSeconds(r) < 0 ? '—' : duration(r.lag_seconds * 1000);
  return unknown && UNKNOWN_BEFORE_FETCH.has(c.key) ? '—' : int(r[c.key]);
}

// byTopicPartition is every sort's tie-break, so that equal rows keep a
// stable, meaningful order.
function byTopicPartition(a, b) {
  if (a.source_topic !== b.source_topic) return a.source_topic < b.source_topic ? -1 : 1;
  return a.partition - b.partition;
}

export class PartitionTable {
  constructor(root) {
    this.root = root;
    this.table = root.querySelector('table');
    this.tbody = root.querySelector('tbody');
    this.filterInput = root.querySelector('.filter');
    this.info = root.querySelector('.page-info');
    this.prev = root.querySelector('.prev');
    this.next = root.querySelector('.next');
    this.sizeSelect = root.querySelector('.page-size');
    this.empty = root.querySelector('.empty');
    this.rows = [];
    this.view = []; // filtered and sorted
    this.sort = { key: 'lag_records', dir: -1 }; // the most lagging first
    this.page = 0;
    this.pageSize = 50;
    this.filter = '';

    const headRow = document.createElement('tr');
    this.heads = COLUMNS.map((c) => {
      const th = document.createElement('th');
      th.scope = 'col';
      if (!c.text) th.className = 'num';
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'sort';
      b.dataset.key = c.key;
      b.textContent = c.label;
      b.addEventListener('click', () => this.sortBy(c.key));
      th.append(b);
      headRow.append(th);
      return th;
    });
    this.table.querySelector('thead').append(headRow);

    for (const n of PAGE_SIZES) {
      const o = document.createElement('option');
      o.value = String(n);
      o.textContent = `${n} per page`;
      o.selected = n === this.pageSize;
      this.sizeSelect.append(o);
    }
    this.sizeSelect.addEventListener('change', () => {
      this.pageSize = Number(this.sizeSelect.value);
      this.page = 0;
      this.refresh();
    });
    this.filterInput.addEventListener('input', () => {
      this.filter = this.filterInput.value.trim().toLowerCase();
      this.page = 0;
      this.refresh();
    });
    this.prev.addEventListener('click', () => this.go(this.page - 1));
    this.next.addEventListener('click', () => this.go(this.page + 1));
    this.pool = [];
  }

  // setRows takes a new status's partitions and redraws the current page.
  setRows(rows) {
    this.rows = rows;
    this.refresh();
  }

  // sortBy sorts by key, or reverses the order if it already sorts by key.
  // Numbers start with the largest, text with A.
  sortBy(key) {
    const col = COLUMNS.find((c) => c.key === key);
    if (this.sort.key === key) this.sort.dir = -this.sort.dir;
    else this.sort = { key, dir: col.text ? 1 : -1 };
    this.page = 0;
    this.refresh();
  }

  go(page) {
    this.page = page;
    this.refresh();
  }

  refresh() {
    const { key, dir } = this.sort;
    const col = COLUMNS.find((c) => c.key === key);
    const f = this.filter;
    const view = f
      ? this.rows.filter((r) => r.source_topic.toLowerCase().includes(f) || r.destination_topic.toLowerCase().includes(f) ||
        `${r.source_topic}[${r.partition}]`.toLowerCase() === f)
      : this.rows.slice();
    if (col.text) {
      view.sort((a, b) => (a[key] === b[key] ? byTopicPartition(a, b) : (a[key] < b[key] ? -dir : dir)));
    } else {
      const num = col.time ? lagSeconds : (r) => r[key];
      view.sort((a, b) => (num(a) - num(b)) * dir || byTopicPartition(a, b));
    }
    this.view = view;

    const pages = Math.max(1, Math.ceil(view.length / this.pageSize));
    this.page = Math.min(Math.max(0, this.page), pages - 1);
    const from = this.page * this.pageSize;
    const shown = view.slice(from, from + this.pageSize);
    this.fill(shown);

    for (const th of this.heads) {
      const k = th.firstChild.dataset.key;
      th.setAttribute('aria-sort', k === key ? (dir > 0 ? 'ascending' : 'descending') : 'none');
    }
    this.info.textContent = view.length === 0 ? '0 partitions'
      : `${int(from + 1)}–${int(from + shown.length)} of ${int(view.length)}${f ? ` (${int(this.rows.length)} in all)` : ''}`;
    this.prev.disabled = this.page === 0;
    this.next.disabled = this.page >= pages - 1;
    this.empty.hidden = this.rows.length > 0;
  }

  // fill writes rows into the pooled <tr>s, creating only what is missing,
  // touching only the cells whose text changed.
  fill(rows) {
    while (this.pool.length < rows.length) {
      const tr = document.createElement('tr');
      for (const c of COLUMNS) {
        const td = document.createElement('td');
        if (!c.text) td.className = 'num';
        tr.append(td);
      }
      this.tbody.append(tr);
      this.pool.push(tr);
    }
    for (let i = 0; i < this.pool.length; i++) {
      const tr = this.pool[i];
      const r = rows[i];
      if (!r) {
        tr.hidden = true;
        continue;
      }
      tr.hidden = false;
      const cells = tr.cells;
      // A high watermark below the next offset is one the link has not
      // fetched yet in this session (it reads 0 until then): its lag is
      // not known either.
      const unknown = r.source_high_watermark < r.source_next_offset;
      for (let j = 0; j < COLUMNS.length; j++) {
        const c = COLUMNS[j];
        const text = cellText(r, c, unknown);
        if (cells[j].textContent !== text) cells[j].textContent = text;
      }
      const lagging = r.lag_records > 0;
      if (tr.classList.contains('lagging') !== lagging) tr.classList.toggle('lagging', lagging);
    }
  }
}
