// graphile-worker's side of bench/peers/run_postgres.sh: the issue 9
// workloads, one runner (concurrency 10) in this process, jobs added with
// WorkerUtils.addJobs (chunks of 1,000), graphile-worker's defaults
// otherwise (pollInterval 2 s for future jobs; LISTEN/NOTIFY for new ones).
// Each workload on a fresh schema of its own. A drain ends when the last
// job's success event has fired and the jobs table is empty (graphile-worker
// deletes a job when it completes), so every completion is stored.
//
// graphile-worker has no retry delay setting: a failed job is retried after
// exp(min(attempts, 10)) seconds (e^1 = 2.7 s after a first failure), so
// its fail-once figure is bound by that wait, not by its speed.
'use strict';
const { run, makeWorkerUtils, Logger } = require('graphile-worker');
const c = require('./common');
const pgc = require('./pg_common');

const a = c.parseArgs(process.argv);
const silent = new Logger(() => () => {});

async function fresh(admin, schema) {
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  const utils = await makeWorkerUtils({ connectionString: a.url, schema, logger: silent });
  await utils.migrate();
  return utils;
}

async function waitEmpty(admin, schema) {
  for (;;) {
    const r = await admin.query(`SELECT count(*)::int AS n FROM ${schema}._private_jobs`);
    if (r.rows[0].n === 0) return;
    await c.sleep(2);
  }
}

async function drain(admin, workload) {
  const failOnce = workload === 'failonce';
  const n = failOnce ? a.failJobs : a.jobs;
  const schema = 'gw_' + workload;
  const utils = await fresh(admin, schema);
  const e0 = await pgc.readInfo(admin, a);
  const te = c.nowNs();
  for (let first = 0; first < n; first += 1000) {
    const batch = [];
    for (let i = first; i < Math.min(n, first + 1000); i++) {
      batch.push({ identifier: 'job', payload: { i }, maxAttempts: 2 });
    }
    await utils.addJobs(batch);
  }
  const enqueueS = Number(c.nowNs() - te) / 1e9;
  const e1 = await pgc.readInfo(admin, a);

  let done = 0, finish;
  const finished = new Promise((r) => { finish = r; });
  const d0 = await pgc.readInfo(admin, a);
  const t0 = c.nowNs();
  const runner = await run({
    connectionString: a.url, schema, concurrency: a.concurrency, noHandleSignals: true, logger: silent,
    taskList: {
      job: async (_payload, helpers) => {
        if (failOnce && helpers.job.attempts === 1) throw new Error('first attempt fails');
      },
    },
  });
  runner.events.on('job:success', () => { if (++done === n) finish(); });
  await finished;
  await waitEmpty(admin, schema);
  const secs = Number(c.nowNs() - t0) / 1e9;
  const d1 = await pgc.readInfo(admin, a);
  await runner.stop();
  await utils.release();
  c.result({ lib: 'graphile-worker', label: a.label, workload, jobs: n, seconds: secs, jobs_per_s: n / secs,
    server: pgc.serverDelta(d0, d1) });
  c.result({ lib: 'graphile-worker', label: a.label, workload: 'enqueue_' + workload, jobs: n, seconds: enqueueS,
    jobs_per_s: n / enqueueS, server: pgc.serverDelta(e0, e1) });
}

async function latency(admin) {
  const n = a.latencyJobs, schema = 'gw_latency';
  const utils = await fresh(admin, schema);
  const enq = new Array(n), start = new Array(n);
  let done = 0, finish;
  const finished = new Promise((r) => { finish = r; });
  const runner = await run({
    connectionString: a.url, schema, concurrency: a.concurrency, noHandleSignals: true, logger: silent,
    taskList: { job: async (payload) => { start[payload.i] = c.nowNs(); } },
  });
  runner.events.on('job:success', () => { if (++done === n) finish(); });
  await c.sleep(500);  // An idle worker, listening.
  const i0 = await pgc.readInfo(admin, a);
  const t0 = Date.now();
  for (let i = 0; i < n; i++) {
    enq[i] = c.nowNs();
    await utils.addJob('job', { i });
    const wait = t0 + 5 * (i + 1) - Date.now();
    if (wait > 0) await c.sleep(wait);
  }
  await finished;
  const secs = (Date.now() - t0) / 1e3;
  const i1 = await pgc.readInfo(admin, a);
  await runner.stop();
  await utils.release();
  const ms = enq.map((e, i) => Number(start[i] - e) / 1e6);
  c.result({ lib: 'graphile-worker', label: a.label, workload: 'latency', jobs: n, seconds: secs,
    ...c.percentiles(ms), server: pgc.serverDelta(i0, i1) });
}

pgc.main(a, drain, latency);
