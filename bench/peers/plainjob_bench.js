// plainjob's side of bench/peers/run_sqlite.sh (issue 12, "SQLite side by
// side with plainjob"): the workloads of jobpact_peer_bench.cc that plainjob
// has, through plainjob 0.0.14 on better-sqlite3 as its README sets it up
// (defineQueue({ connection: better(new Database(file)) }), defineWorker).
// defineQueue sets journal_mode=WAL, synchronous=1 (NORMAL) and
// busy_timeout=5000 on its connection; --synchronous full sets
// PRAGMA synchronous=FULL on that connection afterwards.
//
//   noop  N no-op jobs, enqueued with queue.addMany in chunks of 1,000 (one
//         transaction each: the enqueue figure), then drained by the
//         worker(s): jobs/s from worker.start() to the last onCompleted
//         (called after the job's 'done' update has committed).
//
// plainjob has no idempotency or dedup keys (jobpact's idem workload) and no
// retries (a failed job stays failed: no failonce workload). Its worker
// takes one job at a time (one IMMEDIATE transaction to claim it, one
// autocommit UPDATE to mark it done) on the process's one connection;
// --concurrency N defines N workers on that queue (default 1: a no-op
// handler never yields, so more workers in one event loop add nothing).
//
// Usage: node plainjob_bench.js --url sqlite:///DIR/NAME.db [--jobs N]
//          [--concurrency N] [--synchronous normal|full] [--workloads noop]
// Each workload opens a fresh DIR/NAME-WORKLOAD.db (removed first, with its
// -wal and -shm). One line per figure: RESULT {json}; server.cpu_s is this
// process's CPU time over the measured phase (SQLite runs in-process).
'use strict';
const fs = require('fs');
const { result, nowNs } = require('./common');

function parseArgs(argv) {
  const a = { url: '', jobs: 20000, concurrency: 1, synchronous: '', label: '', workloads: ['noop'] };
  for (let i = 2; i < argv.length; i++) {
    const v = () => argv[++i];
    switch (argv[i]) {
      case '--url': a.url = v(); break;
      case '--jobs': a.jobs = Number(v()); break;
      case '--concurrency': a.concurrency = Number(v()); break;
      case '--synchronous': a.synchronous = v(); break;
      case '--label': a.label = v(); break;
      case '--workloads': a.workloads = v().split(','); break;
      // run_sqlite.sh passes the same counts to every side; plainjob has no
      // failonce or latency workload here.
      case '--fail-jobs': case '--latency-jobs': v(); break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  const m = /^sqlite:\/\/(\/[^?]*?)(\.db)?(\?.*)?$/.exec(a.url);
  if (!m) throw new Error('--url: sqlite:///absolute/path.db');
  a.base = m[1];
  if (a.synchronous && !['normal', 'full'].includes(a.synchronous)) throw new Error('--synchronous normal|full');
  return a;
}

const cpuSeconds = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

async function noop(a, plainjob, Database) {
  const file = `${a.base}-plainjob_noop.db`;
  for (const s of ['', '-wal', '-shm', '-journal']) fs.rmSync(file + s, { force: true });
  const db = new Database(file);
  const queue = plainjob.defineQueue({ connection: plainjob.better(db), logger: quietLogger });
  if (a.synchronous) db.pragma(`synchronous = ${a.synchronous.toUpperCase()}`);
  const sync = db.pragma('synchronous', { simple: true });
  const journal = db.pragma('journal_mode', { simple: true });

  const c0 = cpuSeconds();
  const t0 = nowNs();
  for (let first = 0; first < a.jobs; first += 1000) {
    const chunk = [];
    for (let i = first; i < Math.min(a.jobs, first + 1000); i++) chunk.push({ i });
    queue.addMany('bench.job', chunk);
  }
  const enqueueS = Number(nowNs() - t0) / 1e9;
  const enqueueCpu = cpuSeconds() - c0;

  let done = 0;
  let finish;
  const finished = new Promise((r) => { finish = r; });
  const workers = [];
  for (let w = 0; w < a.concurrency; w++) {
    workers.push(plainjob.defineWorker('bench.job', () => {}, {
      queue,
      logger: quietLogger,
      onCompleted: () => { if (++done === a.jobs) finish(nowNs()); },
    }));
  }
  const d0 = cpuSeconds();
  const s0 = nowNs();
  const running = workers.map((w) => w.start());
  const timeout = setTimeout(() => {
    process.stderr.write(`noop: only ${done} of ${a.jobs} jobs done in 600 s\n`);
    process.exit(1);
  }, 600000);
  const s1 = await finished;
  const drainCpu = cpuSeconds() - d0;
  clearTimeout(timeout);
  await Promise.all(workers.map((w) => w.stop()));
  await Promise.all(running);
  queue.close();

  const drainS = Number(s1 - s0) / 1e9;
  const common = { lib: 'plainjob', label: a.label, jobs: a.jobs, synchronous: sync, journal_mode: journal };
  result({ ...common, workload: 'noop', seconds: drainS, jobs_per_s: a.jobs / drainS, server: { cpu_s: drainCpu } });
  result({ ...common, workload: 'enqueue_noop', seconds: enqueueS, jobs_per_s: a.jobs / enqueueS,
    server: { cpu_s: enqueueCpu } });
}

// plainjob logs every claim and completion at debug level through the
// logger it is given (console by default): none here, as on the jobpact side.
const quietLogger = { error: (...m) => console.error(...m), warn: () => {}, info: () => {}, debug: () => {} };

async function main() {
  const a = parseArgs(process.argv);
  const plainjob = await import('plainjob');  // an ES module
  const Database = require('better-sqlite3');
  for (const w of a.workloads) {
    if (w === 'noop') await noop(a, plainjob, Database);
    else throw new Error(`plainjob has no ${w} workload here`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
