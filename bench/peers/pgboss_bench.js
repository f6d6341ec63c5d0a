// pg-boss's side of bench/peers/run_postgres.sh: the issue 9 workloads.
// pg-boss 10 polls: each worker (work()) fetches up to batchSize jobs, runs
// its handler on them, and waits until its polling interval (at least
// 0.5 s) has passed before the next fetch, even when it found jobs; it has
// no concurrency option. Here: 10 workers (the concurrency of every side),
// each polling every 0.5 s (pg-boss's minimum) for up to 100 jobs, so
// pg-boss's own ceiling in this set-up is 10 x 100 / 0.5 s = 2,000 jobs/s.
// Jobs are added with insert() (chunks of 1,000); completed jobs are kept
// (pg-boss's default retention), as jobpact keeps final statuses. Each
// workload on a fresh schema of its own. A drain ends when the database
// holds every job as completed (pg-boss completes a batch after its
// handler returns, without waiting).
'use strict';
const PgBoss = require('pg-boss');
const c = require('./common');
const pgc = require('./pg_common');

const a = c.parseArgs(process.argv);
const BATCH = 100;
const POLL_S = 0.5;

async function fresh(admin, schema) {
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  const boss = new PgBoss({ connectionString: a.url, schema, schedule: false, supervise: false,
    max: a.concurrency + 2 });
  boss.on('error', (err) => console.error('pg-boss error', err));
  await boss.start();
  await boss.createQueue('job');
  return boss;
}

async function waitCompleted(admin, schema, n) {
  for (;;) {
    const r = await admin.query(`SELECT count(*)::int AS n FROM ${schema}.job WHERE state = 'completed'`);
    if (r.rows[0].n >= n) return;
    await c.sleep(2);
  }
}

async function workers(boss, handler) {
  for (let w = 0; w < a.concurrency; w++) {
    await boss.work('job', { batchSize: BATCH, pollingIntervalSeconds: POLL_S, includeMetadata: true }, handler);
  }
}

async function drain(admin, workload) {
  const failOnce = workload === 'failonce';
  const n = failOnce ? a.failJobs : a.jobs;
  const schema = 'pgboss_' + workload;
  const boss = await fresh(admin, schema);
  const e0 = await pgc.readInfo(admin, a);
  const te = c.nowNs();
  for (let first = 0; first < n; first += 1000) {
    const batch = [];
    for (let i = first; i < Math.min(n, first + 1000); i++) {
      batch.push({ name: 'job', data: { i }, ...(failOnce ? { retryLimit: 1, retryDelay: 0 } : {}) });
    }
    await boss.insert(batch);
  }
  const enqueueS = Number(c.nowNs() - te) / 1e9;
  const e1 = await pgc.readInfo(admin, a);

  const d0 = await pgc.readInfo(admin, a);
  const t0 = c.nowNs();
  // A failing first attempt is failed on its own (boss.fail), so the rest of
  // its batch still completes when the handler returns.
  await workers(boss, async (jobs) => {
    if (!failOnce) return;
    for (const job of jobs) {
      if (job.retryCount === 0) await boss.fail('job', job.id, { message: 'first attempt fails' });
    }
  });
  await waitCompleted(admin, schema, n);
  const secs = Number(c.nowNs() - t0) / 1e9;
  const d1 = await pgc.readInfo(admin, a);
  await boss.stop({ graceful: false, wait: true });
  c.result({ lib: 'pg-boss', label: a.label, workload, jobs: n, seconds: secs, jobs_per_s: n / secs,
    server: pgc.serverDelta(d0, d1) });
  c.result({ lib: 'pg-boss', label: a.label, workload: 'enqueue_' + workload, jobs: n, seconds: enqueueS,
    jobs_per_s: n / enqueueS, server: pgc.serverDelta(e0, e1) });
}

async function latency(admin) {
  const n = a.latencyJobs, schema = 'pgboss_latency';
  const boss = await fresh(admin, schema);
  const enq = new Array(n), start = new Array(n);
  await workers(boss, async (jobs) => {
    const t = c.nowNs();
    for (const job of jobs) start[job.data.i] = t;
  });
  await c.sleep(500);  // Idle workers, polling.
  const i0 = await pgc.readInfo(admin, a);
  const t0 = Date.now();
  for (let i = 0; i < n; i++) {
    enq[i] = c.nowNs();
    await boss.send('job', { i });
    const wait = t0 + 5 * (i + 1) - Date.now();
    if (wait > 0) await c.sleep(wait);
  }
  await waitCompleted(admin, schema, n);
  const secs = (Date.now() - t0) / 1e3;
  const i1 = await pgc.readInfo(admin, a);
  await boss.stop({ graceful: false, wait: true });
  const ms = enq.map((e, i) => Number(start[i] - e) / 1e6);
  c.result({ lib: 'pg-boss', label: a.label, workload: 'latency', jobs: n, seconds: secs,
    ...c.percentiles(ms), server: pgc.serverDelta(i0, i1) });
}

pgc.main(a, drain, latency);
