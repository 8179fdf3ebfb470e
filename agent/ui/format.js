// Number, byte and time formatting for the status page. One fixed locale,
// so that the figures read the same on every operator's machine.

const ints = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const one = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });

// int: 1234567 -> "1,234,567"; anything that is not a finite number -> "—".
export function int(n) {
  return Number.isFinite(n) ? ints.format(n) : '—';
}

// count: a compact figure for a chart axis or a rate: 950, 9.5k, 1.2M.
export function count(n) {
  if (!Number.isFinite(n)) return '—';
  const a = Math.abs(n);
  if (a >= 1e9) return one.format(n / 1e9) + 'G';
  if (a >= 1e6) return one.format(n / 1e6) + 'M';
  if (a >= 1e4) return one.format(n / 1e3) + 'k';
  return a >= 100 ? ints.format(n) : one.format(n);
}

const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

// bytes: 1536 -> "1.5 KiB".
export function bytes(n) {
  if (!Number.isFinite(n)) return '—';
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? ints.format(v) : one.format(v)) + ' ' + units[i];
}

// isTime: a Go time that was set (the zero time marshals as year 1).
export function isTime(s) {
  const t = Date.parse(s);
  return Number.isFinite(t) && t > 0;
}

const pad = (n) => String(n).padStart(2, '0');

// clock: local "2026-11-29 12:57:45".
export function clock(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// hms: local "12:57:45".
export function hms(ms) {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// duration: 3725000 -> "1h 2m", 45000 -> "45s": the largest unit and the
// one after it.
export function duration(ms) {
  if (!Number.isFinite(ms)) return '—';
  const s = Math.max(0, Math.floor(ms / 1000));
  const steps = [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]];
  let i = steps.findIndex(([, size]) => s >= size);
  if (i < 0) i = steps.length - 1;
  const [u1, z1] = steps[i];
  const first = Math.floor(s / z1) + u1;
  if (i === steps.length - 1) return first;
  const [u2, z2] = steps[i + 1];
  return `${first} ${Math.floor((s % z1) / z2)}${u2}`;
}
