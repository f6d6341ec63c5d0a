// BullMQ's side of bench/peers/run.sh: the issue 8 workloads, one Worker
// (concurrency 10) in this process, jobs added with Queue.addBulk (chunks of
// 1,000), BullMQ's defaults otherwise (completed jobs are kept, as jobpact
// keeps final statuses). Each workload after FLUSHDB, on a queue of its own.
'use strict';
const { Queue, Worker, QueueEvents } = require('bullmq');
const c = require('./common');

const a = c.parseArgs(process.argv);
const connection = { host: a.host, port: a.port, db: a.db, maxRetriesPerRequest: null };
const admin = c.adminClient(a);

async function drain(workload) {
  await admin.flushdb();
  const failOnce = workload === 'failonce';
  const n = failOnce ? a.failJobs : a.jobs;
  const name = 'peer_' + workload;
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  const opts = failOnce ? { attempts: 2, backoff: { type: 'fixed', delay: 0 } } : {};
  const e0 = await c.readInfo(admin);
  const te = c.nowNs();
  for (let first = 0; first < n; first += 1000) {
    const batch = [];
    for (let i = first; i < Math.min(n, first + 1000); i++) batch.push({ name: 'job', data: { i }, opts });
    await queue.addBulk(batch);
  }
  const enqueueS = Number(c.nowNs() - te) / 1e9;
  const e1 = await c.readInfo(admin);

  let done = 0, finish;
  const finished = new Promise((r) => { finish = r; });
  const worker = new Worker(name, async (job) => {
    if (failOnce && job.attemptsMade === 0) throw new Error('first attempt fails');
  }, { connection, concurrency: a.concurrency, autorun: false });
  worker.on('completed', () => { if (++done === n) finish(); });
  worker.on('error', (err) => console.error('worker error', err));
  await worker.waitUntilReady();
  const d0 = await c.readInfo(admin);
  const t0 = c.nowNs();
  worker.run();
  await finished;
  const secs = Number(c.nowNs() - t0) / 1e9;
  const d1 = await c.readInfo(admin);
  await worker.close();
  await queue.close();
  c.result({ lib: 'bullmq', label: a.label, workload, jobs: n, seconds: secs, jobs_per_s: n / secs,
    server: c.serverDelta(d0, d1) });
  c.result({ lib: 'bullmq', label: a.label, workload: 'enqueue_' + workload, jobs: n, seconds: enqueueS,
    jobs_per_s: n / enqueueS, server: c.serverDelta(e0, e1) });
}

async function latency() {
  await admin.flushdb();
  const n = a.latencyJobs, name = 'peer_latency';
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  const enq = new Array(n), start = new Array(n);
  let done = 0, finish;
  const finished = new Promise((r) => { finish = r; });
  const worker = new Worker(name, async (job) => { start[job.data.i] = c.nowNs(); },
    { connection, concurrency: a.concurrency });
  worker.on('completed', () => { if (++done === n) finish(); });
  await worker.waitUntilReady();
  await c.sleep(500);  // An idle worker, blocked on the server.
  const i0 = await c.readInfo(admin);
  const t0 = Date.now();
  for (let i = 0; i < n; i++) {
    enq[i] = c.nowNs();
    await queue.add('job', { i });
    const wait = t0 + 5 * (i + 1) - Date.now();
    if (wait > 0) await c.sleep(wait);
  }
  await finished;
  const secs = (Date.now() - t0) / 1e3;
  const i1 = await c.readInfo(admin);
  await worker.close();
  await queue.close();
  const ms = enq.map((e, i) => Number(start[i] - e) / 1e6);
  c.result({ lib: 'bullmq', label: a.label, workload: 'latency', jobs: n, seconds: secs,
    ...c.percentiles(ms), server: c.serverDelta(i0, i1) });
}

(async () => {
  for (const w of a.workloads) {
    if (w === 'latency') await latency(); else await drain(w);
  }
  await admin.quit();
  process.exit(0);
})().catch((err) => { console.error(err); process.exit(1); });
