// The dashboard in a real browser: starts the demo with its dashboard
// (examples/demo --dashboard 0 --serve), drives Debian's chromium headless
// through playwright-core, and checks what a person sees:
//   - the numbers per job type are those of /metrics;
//   - an action without the operator token is refused on the page;
//   - a dry-run replay of a DLQ entry lists it and changes nothing;
//   - the real replay takes it out of the DLQ (the count shown drops by one,
//     /metrics counts the replay, the entry's audit names the dashboard);
//   - the page logs no error (a CSP violation would be one).
// A screenshot of the page is saved as the test's artifact.
//
// Usage: node dashboard_test.mjs DEMO_BINARY ARTIFACT_DIR
// Exit 77 (ctest: skipped) when chromium or node_modules are missing,
// unless JOBPACT_REQUIRE_BROWSER=1 (scripts/test sets it): then exit 1.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';

const here = dirname(fileURLToPath(import.meta.url));
const [demoBinary, artifactDir] = process.argv.slice(2);
const CHROMIUM = process.env.JOBPACT_CHROMIUM || '/usr/bin/chromium';
const required = process.env.JOBPACT_REQUIRE_BROWSER === '1';

function skip(why) {
  if (required) {
    console.error(`FAIL: ${why} (JOBPACT_REQUIRE_BROWSER=1)`);
    process.exit(1);
  }
  console.log(`SKIP: ${why}`);
  process.exit(77);
}

if (!demoBinary || !artifactDir) {
  console.error('usage: node dashboard_test.mjs DEMO_BINARY ARTIFACT_DIR');
  process.exit(2);
}
if (!existsSync(CHROMIUM)) skip(`${CHROMIUM} is missing (Debian: apt-get install chromium)`);
let chromium;
try {
  chromium = createRequire(join(here, 'package.json'))('playwright-core').chromium;
} catch (e) {
  skip(`playwright-core is not installed (run npm ci in ${here})`);
}

let failures = 0;
function check(ok, what, detail) {
  if (ok) {
    console.log(`ok: ${what}`);
  } else {
    failures++;
    console.error(`FAILED: ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  }
}

// Sums of a counter over every series, by one label, from /metrics' text.
function sumBy(scrape, metric, label) {
  const out = {};
  for (const line of scrape.split('\n')) {
    if (!line.startsWith(metric + '{')) continue;
    const m = line.match(new RegExp(label + '="((?:[^"\\\\]|\\\\.)*)"'));
    if (!m) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    out[m[1]] = (out[m[1]] || 0) + value;
  }
  return out;
}

function startDemo(token) {
  return new Promise((resolve, reject) => {
    const demo = spawn(demoBinary, ['--jobs', '40', '--workers', '4', '--dashboard', '0', '--serve',
                                    '--token', token], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let url = null;
    const timer = setTimeout(() => reject(new Error('the demo did not start serving in 240 s:\n' + out)),
                             240000);
    demo.stdout.on('data', (chunk) => {
      out += chunk.toString();
      const m = out.match(/^DEMO_DASHBOARD url=(\S+) token=/m);
      if (m) url = m[1];
      if (url && /^dashboard: serving /m.test(out)) {
        clearTimeout(timer);
        resolve({ demo, url, output: () => out });
      }
    });
    demo.stderr.on('data', (chunk) => { out += chunk.toString(); });
    demo.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the demo exited (${code}) before serving:\n${out}`));
    });
  });
}

async function main() {
  mkdirSync(artifactDir, { recursive: true });
  const token = randomBytes(12).toString('hex');
  const { demo, url } = await startDemo(token);
  console.log(`demo serves ${url}`);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const pageErrors = [];
    page.on('console', (msg) => { if (msg.type() === 'error') pageErrors.push(msg.text()); });
    page.on('pageerror', (err) => pageErrors.push(String(err)));
    const requests = [];
    page.on('request', (r) => requests.push(r.url()));

    await page.goto(url);
    await page.waitForSelector('body[data-loaded]');
    await page.waitForSelector('#dlq tbody tr');

    // The numbers per job type against /metrics (the workload is over: they
    // do not move while we compare).
    const scrape = await (await fetch(url + 'metrics')).text();
    for (const [metric, field] of [['jobpact_jobs_enqueued_total', 'enqueued'],
                                   ['jobpact_jobs_succeeded_total', 'succeeded'],
                                   ['jobpact_jobs_failed_total', 'failed'],
                                   ['jobpact_jobs_dead_lettered_total', 'dead_lettered'],
                                   ['jobpact_job_retries_total', 'retries']]) {
      const want = sumBy(scrape, metric, 'job_type');
      for (const type of ['invoice.generate', 'email.send', 'upstream.fetch', 'report.render']) {
        const shown = await page.textContent(`#types tr[data-type="${type}"] td[data-field="${field}"]`);
        check(Number(shown) === (want[type] || 0), `${type} ${field}: page ${shown} = /metrics ${want[type] || 0}`);
      }
    }
    const stats = await (await fetch(url + 'api/stats')).json();
    const dlqBefore = Number(await page.textContent('#dlq-count'));
    check(dlqBefore === stats.dead_letters && dlqBefore > 0,
          `DLQ count shown (${dlqBefore}) is the store's (${stats.dead_letters})`);
    check((await page.locator('#dlq tbody tr').count()) === dlqBefore, 'one DLQ row per entry');

    // A replayable entry: not the malformed envelope.
    const rows = await page.$$eval('#dlq tbody tr', (trs) => trs.map((tr) => ({
      id: tr.getAttribute('data-job-id'), reason: tr.children[3].textContent })));
    const target = rows.find((r) => r.reason !== 'invalid_envelope');
    check(target !== undefined, 'the DLQ holds a replayable entry', rows);
    await page.click(`#dlq tr[data-job-id="${target.id}"]`);
    await page.waitForSelector('#entry:not([hidden])');
    check((await page.textContent('#entry-id')) === target.id, 'the entry opens with its id');
    check((await page.locator('#entry-history li').count()) >= 2, 'the entry shows its history');

    // Without the token the action is refused, on the page.
    await page.fill('#action-reason', 'browser test: upstream fixed');
    await page.click('#replay-dry-run');
    await page.waitForFunction(() => document.querySelector('#action-result').textContent.startsWith('refused'));
    check((await page.textContent('#action-result')).includes('Authorization: Bearer'),
          'an action without the token is refused');

    // With it: the dry run lists the entry and changes nothing.
    await page.fill('#token', token);
    await page.click('#token-form button');
    await page.click('#replay-dry-run');
    await page.waitForFunction(() => document.querySelector('#action-result').textContent.startsWith('dry run'));
    check((await page.textContent('#action-result')).includes(`would replay 1 (${target.id})`),
          'the dry run lists the entry', await page.textContent('#action-result'));
    check(await page.isEnabled('#replay-confirm'), 'the real replay is offered after the dry run');
    const afterDry = await (await fetch(url + 'api/stats')).json();
    check(afterDry.dead_letters === dlqBefore, 'the dry run changed nothing in the store');
    check((await fetch(url + `api/dlq/${target.id}`)).status === 200, 'the entry is still in the DLQ');

    // The real replay.
    await page.click('#replay-confirm');
    await page.waitForFunction(() => document.querySelector('#action-result').textContent.startsWith('replayed'));
    await page.waitForFunction((n) => document.querySelector('#dlq-count').textContent === String(n),
                               dlqBefore - 1);
    check(true, `the DLQ count shown dropped to ${dlqBefore - 1}`);
    await page.waitForSelector(`#dlq tr[data-job-id="${target.id}"]`, { state: 'detached' });
    check((await page.locator(`#dlq tr[data-job-id="${target.id}"]`).count()) === 0,
          'the replayed entry left the DLQ table');
    check((await fetch(url + `api/dlq/${target.id}`)).status === 404, 'the entry left the DLQ');
    const after = await (await fetch(url + 'metrics')).text();
    const replayed = Object.values(sumBy(after, 'jobpact_dlq_replayed_total', 'job_type')).reduce((a, b) => a + b, 0);
    check(replayed === 1, `/metrics counts the replay (${replayed})`);

    // The one refusal above is the 401 we asked for; nothing else may fail.
    const unexpected = pageErrors.filter((e) => !e.includes('status of 401'));
    check(unexpected.length === 0, 'the page logged no error', unexpected);
    check(pageErrors.length - unexpected.length === 1, 'the refused action was the only 401', pageErrors);
    const origin = new URL(url).origin;
    const foreign = requests.filter((r) => !r.startsWith(origin));
    check(foreign.length === 0, 'the page loaded nothing from elsewhere', foreign);

    const shot = join(artifactDir, 'dashboard.png');
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot: ${shot}`);
  } finally {
    await browser.close();
    if (demo.exitCode === null && demo.signalCode === null) {
      const exited = new Promise((r) => demo.once('exit', r));
      demo.kill('SIGTERM');
      await exited;
    }
  }
  if (failures > 0) {
    console.error(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log('browser.dashboard: all checks passed');
}

main().catch((e) => {
  console.error('FAILED:', e && e.stack ? e.stack : e);
  process.exit(1);
});
