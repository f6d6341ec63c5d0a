// Shared by the peers' scripts: arguments, the server's own figures (Redis:
// INFO; PostgreSQL: pg_common.js), and the RESULT lines table.js turns into
// the table.
'use strict';

function parseArgs(argv) {
  const a = { url: '', pgPid: 0, jobs: 20000, failJobs: 5000, latencyJobs: 500, concurrency: 10, label: '',
    workloads: ['noop', 'failonce', 'latency'] };
  for (let i = 2; i < argv.length; i++) {
    const v = () => argv[++i];
    switch (argv[i]) {
      case '--url': a.url = v(); break;
      case '--jobs': a.jobs = Number(v()); break;
      case '--fail-jobs': a.failJobs = Number(v()); break;
      case '--latency-jobs': a.latencyJobs = Number(v()); break;
      case '--concurrency': a.concurrency = Number(v()); break;
      case '--label': a.label = v(); break;
      case '--pg-pid': a.pgPid = Number(v()); break;
      case '--workloads': a.workloads = v().split(','); break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!a.url) throw new Error('--url is required');
  const u = new URL(a.url);
  a.host = u.hostname;
  a.port = Number(u.port || 6379);
  a.db = Number((u.pathname || '/0').slice(1) || 0);
  return a;
}

// INFO all as numbers; cmdstat_* lines as <name>.calls / <name>.usec.
async function readInfo(client) {
  const text = await client.info('all');
  const v = {};
  for (const line of text.split(/\r?\n/)) {
    const c = line.indexOf(':');
    if (c < 0 || line[0] === '#') continue;
    const key = line.slice(0, c), value = line.slice(c + 1);
    if (key.startsWith('cmdstat_')) {
      v[key + '.calls'] = Number(/calls=(\d+)/.exec(value)[1]);
      v[key + '.usec'] = Number(/usec=(\d+)/.exec(value)[1]);
    } else if (!Number.isNaN(parseFloat(value))) {
      v[key] = parseFloat(value);
    }
  }
  return v;
}

function serverDelta(a, b) {
  const d = (k) => (b[k] || 0) - (a[k] || 0);
  return {
    cpu_s: d('used_cpu_user') + d('used_cpu_sys'),
    reads: d('total_reads_processed'),
    commands: d('total_commands_processed'),
    script_calls: d('cmdstat_evalsha.calls') + d('cmdstat_eval.calls') + d('cmdstat_fcall.calls'),
    script_usec: d('cmdstat_evalsha.usec') + d('cmdstat_eval.usec') + d('cmdstat_fcall.usec'),
  };
}

function result(obj) {
  process.stdout.write('RESULT ' + JSON.stringify(obj) + '\n');
}

// A connection of the bench's own, for FLUSHDB and INFO.
function adminClient(a) {
  const IORedis = require('ioredis');
  return new IORedis({ host: a.host, port: a.port, db: a.db, maxRetriesPerRequest: null });
}

const nowNs = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function percentiles(msList) {
  const s = [...msList].sort((x, y) => x - y);
  const p = (q) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
  return { p50_ms: p(0.5), p99_ms: p(0.99), max_ms: s[s.length - 1] };
}

module.exports = { parseArgs, readInfo, serverDelta, result, adminClient, nowNs, sleep, percentiles };
