// bee-queue's side of bench/peers/run.sh: the issue 8 workloads, one
// worker Queue (process(10, ...)) in this process, jobs saved with
// Queue.saveAll (chunks of 1,000), retries with the immediate backoff,
// bee-queue's defaults otherwise (succeeded jobs are kept, as jobpact keeps
// final statuses). Each workload after FLUSHDB, on a queue of its own.
'use strict';
const BeeQueue = require('bee-queue');
const c = require('./common');

const a = c.parseArgs(process.argv);
const redis = { host: a.host, port: a.port, db: a.db };
const admin = c.adminClient(a);
const common = { redis, getEvents: false, storeJobs: false };

async function drain(workload) {
  await admin.flushdb();
  const failOnce = workload === 'failonce';
  const n = failOnce ? a.failJobs : a.jobs;
  const name = 'peer_' + workload;
  const producer = new BeeQueue(name, { ...common, isWorker: false });
  await producer.ready();
  const e0 = await c.readInfo(admin);
  const te = c.nowNs();
  for (let first = 0; first < n; first += 1000) {
    const batch = [];
    for (let i = first; i < Math.min(n, first + 1000); i++) {
      const job = producer.createJob({ i });
      if (failOnce) job.retries(1).backoff('immediate');
      batch.push(job);
    }
    const errors = await producer.saveAll(batch);
    if (errors.size) throw new Error(`saveAll: ${errors.size} errors`);
  }
  const enqueueS = Number(c.nowNs() - te) / 1e9;
  const e1 = await c.readInfo(admin);

  const worker = new BeeQueue(name, { ...common, activateDelayedJobs: false });
  await worker.ready();
  let done = 0, finish;
  const finished = new Promise((r) => { finish = r; });
  const failed = new Set();
  worker.on('succeeded', () => { if (++done === n) finish(); });
  worker.on('error', (err) => console.error('worker error', err));
  const d0 = await c.readInfo(admin);
  const t0 = c.nowNs();
  worker.process(a.concurrency, async (job) => {
    if (failOnce && !failed.has(job.id)) {
      failed.add(job.id);
      throw new Error('first attempt fails');
    }
  });
  await finished;
  const secs = Number(c.nowNs() - t0) / 1e9;
  const d1 = await c.readInfo(admin);
  await worker.close();
  await producer.close();
  c.result({ lib: 'bee-queue', label: a.label, workload, jobs: n, seconds: secs, jobs_per_s: n / secs,
    server: c.serverDelta(d0, d1) });
  c.result({ lib: 'bee-queue', label: a.label, workload: 'enqueue_' + workload, jobs: n,
    seconds: enqueueS, jobs_per_s: n / enqueueS, server: c.serverDelta(e0, e1) });
}

async function latency() {
  await admin.flushdb();
  const n = a.latencyJobs, name = 'peer_latency';
  const producer = new BeeQueue(name, { ...common, isWorker: false });
  const worker = new BeeQueue(name, common);
  await producer.ready();
  await worker.ready();
  const enq = new Array(n), start = new Array(n);
  let done = 0, finish;
  const finished = new Promise((r) => { finish = r; });
  worker.on('succeeded', () => { if (++done === n) finish(); });
  worker.process(a.concurrency, async (job) => { start[job.data.i] = c.nowNs(); });
  await c.sleep(500);  // An idle worker, blocked on the server.
  const i0 = await c.readInfo(admin);
  const t0 = Date.now();
  for (let i = 0; i < n; i++) {
    enq[i] = c.nowNs();
    await producer.createJob({ i }).save();
    const wait = t0 + 5 * (i + 1) - Date.now();
    if (wait > 0) await c.sleep(wait);
  }
  await finished;
  const secs = (Date.now() - t0) / 1e3;
  const i1 = await c.readInfo(admin);
  await worker.close();
  await producer.close();
  const ms = enq.map((e, i) => Number(start[i] - e) / 1e6);
  c.result({ lib: 'bee-queue', label: a.label, workload: 'latency', jobs: n, seconds: secs,
    ...c.percentiles(ms), server: c.serverDelta(i0, i1) });
}

(async () => {
  for (const w of a.workloads) {
    if (w === 'latency') await latency(); else await drain(w);
  }
  await admin.quit();
  process.exit(0);
})().catch((err) => { console.error(err); process.exit(1); });
