// Turns the RESULT lines of one run.sh, run_postgres.sh or run_sqlite.sh
// run (a file of JSON objects, one a line) into the table: each workload's
// figure per library, the ratios jobpact/peer, then what bounds each figure,
// from the server's own counters (Redis: INFO; PostgreSQL: /proc, the WAL
// position and the transaction ids; SQLite, which runs inside each
// library's process: that process's CPU time). A workload no library ran
// has no row.
'use strict';
const fs = require('fs');

const rows = fs.readFileSync(process.argv[2], 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const names = { jobpact: 'jobpact', bullmq: 'BullMQ', 'bee-queue': 'bee-queue', 'graphile-worker': 'graphile-worker',
  'pg-boss': 'pg-boss', plainjob: 'plainjob' };
const peers = [...new Set(rows.map((r) => r.lib))].filter((l) => l !== 'jobpact');
const libs = ['jobpact', ...peers];
const get = (lib, workload, label = '') =>
  rows.find((r) => r.lib === lib && r.workload === workload && (r.label || '') === label);

const fmtRate = (r) => (r ? `${Math.round(r.jobs_per_s).toLocaleString('en-US')}/s` : '-');
const fmtMs = (v) => (v === undefined ? '-' : `${v.toFixed(2)} ms`);
const ratio = (x, y) => (x && y ? `${(x / y).toFixed(2)}x` : '-');

const lines = [];
const line = (cells) => lines.push('| ' + cells.join(' | ') + ' |');
line(['workload', ...libs.map((l) => names[l] || l), ...peers.map((p) => `jobpact / ${names[p] || p}`)]);
line(['---', ...libs.map(() => '---:'), ...peers.map(() => '---:')]);
const n = (w) => (libs.map((l) => get(l, w)).find(Boolean) || {}).jobs;
const only = (cells) => [...cells, ...peers.map(() => '(jobpact only)'), ...peers.map(() => '-')];
const rate = (title, w, jobpactOnly) => {
  const title2 = title.replace('N', (n(w) || 0).toLocaleString('en-US'));
  const j = get('jobpact', w);
  if (!libs.some((l) => get(l, w))) return;
  if (jobpactOnly) {
    if (j) line(only([title2, fmtRate(j)]));
    return;
  }
  line([title2, ...libs.map((l) => fmtRate(get(l, w))),
    ...peers.map((p) => ratio(j && j.jobs_per_s, get(p, w) && get(p, w).jobs_per_s))]);
};
rate('N no-op jobs, pre-enqueued, drain (higher is better)', 'noop');
rate('N no-op jobs + idempotency_key + dedup_key, drain', 'idem', true);
rate('N no-op jobs + idempotency_key + dedup_key + lock_key (the full contract), drain', 'full', true);
rate('N jobs failing once, retried at 0 delay where the library allows it, drain', 'failonce');
rate('enqueue N jobs, bulk, 1,000 a call', 'enqueue_noop');
for (const [q, key] of rows.some((r) => r.workload === 'latency') ?
  [['p50', 'p50_ms'], ['p99', 'p99_ms'], ['max', 'max_ms']] : []) {
  const v = (l) => { const r = get(l, 'latency'); return r && r[key]; };
  line([`enqueue->start latency ${q}, idle worker, ${n('latency') || 0} jobs 5 ms apart (lower is better)`,
    ...libs.map((l) => fmtMs(v(l))), ...peers.map((p) => ratio(v('jobpact'), v(p)))]);
}
for (const [w, title] of [
  ['latency_local', "same, enqueued through the worker's own JobRunner (in-process wake-up) p50 / p99 / max"],
  ['latency_poll1', 'same as the first latency rows, poll_interval 1 ms instead of 100 ms, p50 / p99 / max']]) {
  const r = get('jobpact', w);
  if (r) line(only([title, `${fmtMs(r.p50_ms)} / ${fmtMs(r.p99_ms)} / ${fmtMs(r.max_ms)}`]));
}
// A persistence sweep (run.sh --sweep): jobpact no-op at each setting.
for (const r of rows.filter((x) => x.label && x.workload === 'noop')) {
  line(only([`jobpact no-op drain, ${r.label} (${r.jobs.toLocaleString('en-US')} jobs)`, fmtRate(r)]));
}

lines.push('');
const postgres = rows.some((r) => r.server && 'wal_bytes' in r.server);
const sqlite = rows.every((r) => r.server && Object.keys(r.server).join() === 'cpu_s');
if (sqlite) {
  lines.push('What bounds each figure (SQLite runs inside each library\'s own process: that process\'s CPU time, all ' +
    'threads, over the measured phase; per job):');
  lines.push('');
  line(['library', 'workload', 'wall s', 'process CPU us/job', 'process busy (100% = one core)']);
  line(['---', '---', '---:', '---:', '---:']);
  for (const r of rows) {
    const s = r.server, k = r.jobs;
    line([names[r.lib] || r.lib, r.workload + (r.label ? ` (${r.label})` : ''), r.seconds.toFixed(3),
      (s.cpu_s * 1e6 / k).toFixed(1), `${Math.round(100 * s.cpu_s / r.seconds)}%`]);
  }
} else if (postgres) {
  lines.push('What bounds each figure (the server\'s CPU from /proc, its WAL position and transaction ids, over the ' +
    'measured phase; per job):');
  lines.push('');
  line(['library', 'workload', 'wall s', 'server CPU us/job', 'server busy', 'WAL bytes/job',
    'writing transactions/job (xids; writing savepoints count too)']);
  line(['---', '---', '---:', '---:', '---:', '---:', '---:']);
  for (const r of rows) {
    const s = r.server, k = r.jobs;
    line([names[r.lib] || r.lib, r.workload + (r.label ? ` (${r.label})` : ''), r.seconds.toFixed(3),
      (s.cpu_s * 1e6 / k).toFixed(1), `${Math.round(100 * s.cpu_s / r.seconds)}%`, (s.wal_bytes / k).toFixed(0),
      (s.xids / k).toFixed(3)]);
  }
} else {
  lines.push('What bounds each figure (from the server\'s INFO over the measured phase; per job):');
  lines.push('');
  line(['library', 'workload', 'wall s', 'server CPU us/job', 'server busy', 'socket reads/job (~round trips)',
    'commands/job (Lua inner calls incl.)', 'script calls/job', 'script us/job']);
  line(['---', '---', '---:', '---:', '---:', '---:', '---:', '---:', '---:']);
  for (const r of rows) {
    const s = r.server, k = r.jobs;
    line([names[r.lib] || r.lib, r.workload + (r.label ? ` (${r.label})` : ''), r.seconds.toFixed(3),
      (s.cpu_s * 1e6 / k).toFixed(1), `${Math.round(100 * s.cpu_s / r.seconds)}%`, (s.reads / k).toFixed(2),
      (s.commands / k).toFixed(1), (s.script_calls / k).toFixed(2), (s.script_usec / k).toFixed(1)]);
  }
}
process.stdout.write(lines.join('\n') + '\n');
