// Turns the RESULT lines of one run.sh run (a file of JSON objects, one a
// line) into the table: each workload's figure per library, the ratios
// jobpact/peer, then what bounds each figure, from the server's INFO.
'use strict';
const fs = require('fs');

const rows = fs.readFileSync(process.argv[2], 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const libs = ['jobpact', 'bullmq', 'bee-queue'];
const get = (lib, workload, label = '') =>
  rows.find((r) => r.lib === lib && r.workload === workload && (r.label || '') === label);

const fmtRate = (r) => (r ? `${Math.round(r.jobs_per_s).toLocaleString('en-US')}/s` : '-');
const fmtMs = (v) => (v === undefined ? '-' : `${v.toFixed(2)} ms`);
const ratio = (x, y) => (x && y ? `${(x / y).toFixed(2)}x` : '-');

const lines = [];
const line = (cells) => lines.push('| ' + cells.join(' | ') + ' |');
line(['workload', 'jobpact', 'BullMQ', 'bee-queue', 'jobpact / BullMQ', 'jobpact / bee-queue']);
line(['---', '---:', '---:', '---:', '---:', '---:']);
const n = (w) => (get('jobpact', w) || get('bullmq', w) || get('bee-queue', w) || {}).jobs;
const rate = (title, w, only) => {
  const [j, b, q] = libs.map((l) => get(l, w));
  line([title.replace('N', (n(w) || 0).toLocaleString('en-US')), fmtRate(j),
    only ? '(jobpact only)' : fmtRate(b), only ? '(jobpact only)' : fmtRate(q),
    only ? '-' : ratio(j && j.jobs_per_s, b && b.jobs_per_s), only ? '-' : ratio(j && j.jobs_per_s, q && q.jobs_per_s)]);
};
rate('N no-op jobs, pre-enqueued, drain (higher is better)', 'noop');
rate('N no-op jobs + idempotency_key + dedup_key, drain', 'idem', true);
rate('N jobs failing once, retried at 0 delay, drain', 'failonce');
rate('enqueue N jobs, bulk (EnqueueBatch / addBulk / saveAll, 1,000 a call)', 'enqueue_noop');
for (const [q, key] of [['p50', 'p50_ms'], ['p99', 'p99_ms'], ['max', 'max_ms']]) {
  const [j, b, bq] = libs.map((l) => get(l, 'latency'));
  const v = (r) => r && r[key];
  line([`enqueue->start latency ${q}, idle worker, N jobs 5 ms apart (lower is better)`.replace('N', n('latency') || 0),
    fmtMs(v(j)), fmtMs(v(b)), fmtMs(v(bq)), ratio(v(j), v(b)), ratio(v(j), v(bq))]);
}
for (const [w, title] of [
  ['latency_local', "same, enqueued through the worker's own JobRunner (in-process wake-up) p50 / p99 / max"],
  ['latency_poll1', 'same as the first latency rows, poll_interval 1 ms instead of 100 ms, p50 / p99 / max']]) {
  const r = get('jobpact', w);
  if (r) {
    line([title, `${fmtMs(r.p50_ms)} / ${fmtMs(r.p99_ms)} / ${fmtMs(r.max_ms)}`, '(jobpact only)', '(jobpact only)',
      '-', '-']);
  }
}
// The persistence sweep (run.sh --sweep): jobpact no-op at each setting.
for (const r of rows.filter((x) => x.label && x.workload === 'noop')) {
  line([`jobpact no-op drain, ${r.label} (${r.jobs.toLocaleString('en-US')} jobs)`, fmtRate(r),
    '(jobpact only)', '(jobpact only)', '-', '-']);
}

lines.push('');
lines.push('What bounds each figure (from the server\'s INFO over the measured phase; per job):');
lines.push('');
line(['library', 'workload', 'wall s', 'server CPU us/job', 'server busy', 'socket reads/job (~round trips)',
  'commands/job (Lua inner calls incl.)', 'script calls/job', 'script us/job']);
line(['---', '---', '---:', '---:', '---:', '---:', '---:', '---:', '---:']);
for (const r of rows) {
  const s = r.server, k = r.jobs;
  line([r.lib, r.workload + (r.label ? ` (${r.label})` : ''), r.seconds.toFixed(3), (s.cpu_s * 1e6 / k).toFixed(1),
    `${Math.round(100 * s.cpu_s / r.seconds)}%`, (s.reads / k).toFixed(2), (s.commands / k).toFixed(1),
    (s.script_calls / k).toFixed(2), (s.script_usec / k).toFixed(1)]);
}
process.stdout.write(lines.join('\n') + '\n');
