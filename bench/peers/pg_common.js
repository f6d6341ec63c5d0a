// The PostgreSQL peers' shared pieces (graphile_bench.js, pgboss_bench.js):
// the server's own figures over a measured phase, the same ones
// jobpact_peer_bench reads: the CPU seconds of the postmaster and its
// children (/proc; --pg-pid names the postmaster), the WAL bytes written
// (pg_current_wal_lsn) and the transaction ids assigned (the snapshot's
// xmax: one per writing transaction or writing subtransaction).
'use strict';
const fs = require('fs');
const { Client } = require('pg');

function cpuSeconds(postmasterPid) {
  if (!postmasterPid) return 0;
  const hz = 100;  // USER_HZ: sysconf(_SC_CLK_TCK) on Linux.
  let ticks = 0;
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat;
    try { stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8'); } catch { continue; }
    // After the command (which may hold spaces): state ppid ... utime stime.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(name) !== postmasterPid && Number(f[1]) !== postmasterPid) continue;
    ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks / hz;
}

async function adminClient(a) {
  const c = new Client({ connectionString: a.url });
  await c.connect();
  return c;
}

async function readInfo(client, a) {
  const r = await client.query(
    "SELECT (pg_current_wal_lsn() - '0/0')::float8 AS wal, pg_snapshot_xmax(pg_current_snapshot())::text AS xmax");
  return { wal_bytes: Number(r.rows[0].wal), xids: Number(r.rows[0].xmax), cpu_s: cpuSeconds(a.pgPid) };
}

function serverDelta(x, y) {
  return { cpu_s: y.cpu_s - x.cpu_s, wal_bytes: y.wal_bytes - x.wal_bytes, xids: y.xids - x.xids };
}

// Runs the workloads a names, each with the bench's own connection, then
// exits (non-zero on any error).
function main(a, drain, latency) {
  (async () => {
    const admin = await adminClient(a);
    for (const w of a.workloads) {
      if (w === 'latency') await latency(admin); else await drain(admin, w);
    }
    await admin.end();
    process.exit(0);
  })().catch((err) => { console.error(err); process.exit(1); });
}

module.exports = { adminClient, readInfo, serverDelta, main };
