// The jobpact dashboard: plain JavaScript, no framework, nothing from a CDN.
// It reads the endpoint's JSON API (/api/...) and writes the page with
// textContent only (no HTML from data). Actions are POSTs with the
// operator's bearer token (kept in this tab's sessionStorage) and the
// endpoint's CSRF token (from /api/session), and each carries the reason
// the operator typed, which the store keeps in the entry's audit trail.
'use strict';

const REFRESH_MS = 5000;
const state = { session: null, previous: null, selected: null, dryRunFor: null };

function $(id) { return document.getElementById(id); }

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function showError(message) {
  const p = $('error');
  p.textContent = message || '';
  p.hidden = !message;
}

async function api(path, options) {
  const res = await fetch(path, Object.assign({ credentials: 'same-origin' }, options || {}));
  let body = null;
  try { body = await res.json(); } catch (e) { body = { error: 'not JSON: HTTP ' + res.status }; }
  if (!res.ok) throw new Error((body && body.error) || ('HTTP ' + res.status));
  return body;
}

async function act(path, payload) {
  const token = sessionStorage.getItem('jobpact-token') || '';
  const headers = { 'Content-Type': 'application/json', 'X-Jobpact-CSRF': state.session.csrf_token };
  if (token) headers['Authorization'] = 'Bearer ' + token;
  return api(path, { method: 'POST', headers, body: JSON.stringify(payload) });
}

// Numbers as people read them.
function fmtCount(v) { return v === null || v === undefined ? '-' : String(Math.round(v)); }
function fmtRatio(v) { return v === null || v === undefined ? '-' : (100 * v).toFixed(1) + '%'; }
function fmtSeconds(v) {
  if (v === null || v === undefined) return '-';
  if (v < 1) return (v * 1000).toFixed(v < 0.01 ? 2 : 0) + ' ms';
  if (v < 60) return v.toFixed(1) + ' s';
  if (v < 3600) return Math.floor(v / 60) + 'm' + String(Math.floor(v % 60)).padStart(2, '0') + 's';
  return Math.floor(v / 3600) + 'h' + String(Math.floor((v % 3600) / 60)).padStart(2, '0') + 'm';
}
function fmtRate(v) { return v === null ? '-' : v.toFixed(v < 10 ? 2 : 0); }

function cell(row, text, field, numeric) {
  const td = el('td', text, field ? { 'data-field': field } : {});
  if (numeric) td.className = 'num';
  row.appendChild(td);
  return td;
}

function finished(c) {
  return (c.jobs_succeeded || 0) + (c.jobs_failed || 0) + (c.jobs_dead_lettered || 0) +
         (c.jobs_discarded || 0);
}

// Per-second rate of a counter between this refresh and the last one.
function rate(queue, value, now) {
  const p = state.previous;
  if (!p || !(queue in p.values)) return null;
  const dt = (now - p.at) / 1000;
  return dt > 0 ? Math.max(0, (value.now - p.values[queue][value.key]) / dt) : null;
}

function renderQueues(queues, now) {
  const body = $('queues').querySelector('tbody');
  body.replaceChildren();
  const values = {};
  for (const q of queues) {
    const enq = q.counters.jobs_enqueued || 0;
    const fin = finished(q.counters);
    values[q.queue] = { enq, fin };
    const tr = el('tr', null, { 'data-queue': q.queue });
    cell(tr, q.queue);
    // A queue with a maximum depth (backpressure) shows it: "12 / 5000".
    cell(tr, q.max_depth == null ? q.depth : q.depth + ' / ' + q.max_depth, 'depth', true);
    cell(tr, q.running, 'running', true);
    cell(tr, fmtSeconds(q.oldest_ready_age_seconds), 'oldest', true);
    cell(tr, fmtRate(rate(q.queue, { key: 'enq', now: enq }, now)), 'enqueue_rate', true);
    cell(tr, fmtRate(rate(q.queue, { key: 'fin', now: fin }, now)), 'finish_rate', true);
    cell(tr, q.paused ? 'paused' : '', 'paused');
    // A per-tenant concurrency cap: "at most N running per tenant".
    cell(tr, q.per_tenant_limit == null ? '' : '\u2264 ' + q.per_tenant_limit + ' running',
         'per_tenant_limit', true);
    body.appendChild(tr);
  }
  state.previous = { at: now, values };
}

function resumeButton(kind, subject) {
  const b = el('button', 'Resume', { type: 'button', 'data-resume': subject });
  b.disabled = !state.session.actions_enabled;
  b.addEventListener('click', async () => {
    const reason = window.prompt('Resume ' + subject + ': why? (kept in the control audit)');
    if (!reason) return;
    try {
      const payload = { reason };
      payload[kind === 'pause_queue' ? 'queue' : 'job_type'] = subject;
      await act('/api/resume', payload);
      await refresh();
    } catch (e) { showError('resume ' + subject + ': ' + e.message); }
  });
  return b;
}

function renderTypes(types) {
  const body = $('types').querySelector('tbody');
  body.replaceChildren();
  for (const t of types) {
    const c = t.counters;
    const tr = el('tr', null, { 'data-type': t.job_type });
    cell(tr, t.job_type);
    cell(tr, fmtCount(c.jobs_enqueued || 0), 'enqueued', true);
    cell(tr, fmtCount(c.jobs_succeeded || 0), 'succeeded', true);
    cell(tr, fmtCount(c.jobs_failed || 0), 'failed', true);
    cell(tr, fmtCount(c.jobs_dead_lettered || 0), 'dead_lettered', true);
    cell(tr, fmtCount(c.job_retries || 0), 'retries', true);
    cell(tr, fmtRatio(t.success_ratio), 'success_ratio', true);
    cell(tr, fmtRatio(t.retry_ratio), 'retry_ratio', true);
    cell(tr, fmtRatio(t.dlq_ratio), 'dlq_ratio', true);
    cell(tr, fmtSeconds(t.duration_seconds.p50), 'duration_p50', true);
    cell(tr, fmtSeconds(t.duration_seconds.p95), 'duration_p95', true);
    cell(tr, fmtSeconds(t.duration_seconds.p99), 'duration_p99', true);
    cell(tr, fmtSeconds(t.queue_latency_seconds.p95), 'wait_p95', true);
    const last = cell(tr, t.paused ? '' : '');
    if (t.paused) last.appendChild(resumeButton('pause_type', t.job_type));
    body.appendChild(tr);
  }
}

function renderPaused(paused) {
  const ul = $('paused');
  ul.replaceChildren();
  if (paused.length === 0) ul.appendChild(el('li', 'nothing is paused', { class: 'muted' }));
  for (const p of paused) {
    const li = el('li', (p.kind === 'pause_queue' ? 'queue ' : 'type ') + p.subject +
                  ' by ' + p.actor + ': ' + p.reason + ' ', { 'data-paused': p.subject });
    li.appendChild(resumeButton(p.kind, p.subject));
    ul.appendChild(li);
  }
}

function renderRateLimiters(limiters) {
  const body = $('rate-limiters').querySelector('tbody');
  body.replaceChildren();
  if (limiters === null || limiters.length === 0) {
    const tr = el('tr', null, { class: 'muted' });
    const td = cell(tr, limiters === null ? 'this backend has no shared rate limiters'
                                          : 'no rate limiter in use');
    td.setAttribute('colspan', '4');
    body.appendChild(tr);
    return;
  }
  for (const r of limiters) {
    const tr = el('tr', null, { 'data-limiter': r.key });
    cell(tr, r.key);
    cell(tr, r.override === null ? '-' : r.override.per_second + '/s, burst ' + r.override.burst +
         ' (' + r.override.actor + ': ' + r.override.reason + ')', 'override');
    cell(tr, r.backoff_until === null ? '-' : 'until ' + r.backoff_until, 'backoff');
    cell(tr, r.backoff_until === null ? '' : r.backoff_reason, 'backoff_reason');
    body.appendChild(tr);
  }
}

function filterQuery() {
  const form = $('dlq-filter');
  const params = new URLSearchParams();
  for (const name of ['type', 'reason', 'class', 'since', 'until']) {
    const v = form.elements[name].value.trim();
    if (v) params.set(name, v);
  }
  return params.toString();
}

async function loadDlq() {
  const q = filterQuery();
  const data = await api('/api/dlq' + (q ? '?' + q : ''));
  const body = $('dlq').querySelector('tbody');
  body.replaceChildren();
  for (const e of data.entries) {
    const tr = el('tr', null, { 'data-job-id': e.job_id, class: 'clickable' });
    if (e.job_id === state.selected) tr.classList.add('selected');
    cell(tr, e.job_id);
    cell(tr, e.job_type);
    cell(tr, e.queue);
    cell(tr, e.reason);
    cell(tr, e.failure_class || '-');
    cell(tr, e.attempts, null, true);
    cell(tr, e.dead_lettered_at);
    cell(tr, e.last_failure ? e.last_failure.message : '-');
    tr.addEventListener('click', () => showEntry(e.job_id));
    body.appendChild(tr);
  }
}

async function showEntry(id) {
  state.selected = id;
  state.dryRunFor = null;
  $('replay-confirm').disabled = true;
  $('action-result').textContent = '';
  const e = await api('/api/dlq/' + encodeURIComponent(id));
  $('entry').hidden = false;
  $('entry-id').textContent = e.job_id;
  const history = $('entry-history');
  history.replaceChildren();
  for (const t of e.history) {
    history.appendChild(el('li', t.at + '  ' + t.from + ' -> ' + t.to + (t.reason ? '  (' + t.reason + ')' : '')));
  }
  const audit = $('entry-audit');
  audit.replaceChildren();
  const lines = Array.isArray(e.audit) ? e.audit : (e.audit ? [e.audit] : []);
  if (lines.length === 0) audit.appendChild(el('li', 'no operator action yet', { class: 'muted' }));
  for (const a of lines) audit.appendChild(el('li', typeof a === 'string' ? a : JSON.stringify(a)));
  $('entry-payload').textContent = e.payload;
  for (const tr of $('dlq').querySelectorAll('tbody tr')) {
    tr.classList.toggle('selected', tr.getAttribute('data-job-id') === id);
  }
}

function reasonOrComplain() {
  const reason = $('action-reason').value.trim();
  if (!reason) $('action-result').textContent = 'Type a reason first: it goes to the audit trail.';
  return reason;
}

function describe(report) {
  const lines = [];
  if (report.dry_run) lines.push('dry run: would replay ' + report.would_replay.length + ' (' + report.would_replay.join(', ') + ')');
  if (report.replayed && report.replayed.length) lines.push('replayed ' + report.replayed.join(', '));
  if (report.discarded && report.discarded.length) lines.push('discarded ' + report.discarded.join(', '));
  for (const f of report.failed || []) lines.push('failed ' + f.job_id + ': ' + f.error);
  lines.push('as ' + report.actor);
  return lines.join('\n');
}

async function replay(dryRun) {
  const reason = reasonOrComplain();
  if (!reason || !state.selected) return;
  try {
    const report = await act('/api/dlq/replay', { job_ids: [state.selected], dry_run: dryRun, reason });
    $('action-result').textContent = describe(report);
    if (dryRun) {
      state.dryRunFor = report.would_replay.includes(state.selected) ? state.selected : null;
      $('replay-confirm').disabled = state.dryRunFor === null;
    } else {
      $('replay-confirm').disabled = true;
      state.dryRunFor = null;
      await refresh();
    }
  } catch (e) { $('action-result').textContent = 'refused: ' + e.message; }
}

async function discard() {
  const reason = reasonOrComplain();
  if (!reason || !state.selected) return;
  if (!window.confirm('Discard ' + state.selected + ' for good?')) return;
  try {
    const report = await act('/api/dlq/discard', { job_ids: [state.selected], reason });
    $('action-result').textContent = describe(report);
    await refresh();
  } catch (e) { $('action-result').textContent = 'refused: ' + e.message; }
}

async function refresh() {
  try {
    const o = await api('/api/overview');
    const now = Date.now();
    renderQueues(o.queues, now);
    renderTypes(o.types);
    renderPaused(o.paused);
    renderRateLimiters(o.rate_limiters);
    $('workers-busy').textContent = o.workers.busy;
    $('workers-hung').textContent = o.workers.hung;
    $('workers-hung-total').textContent = o.workers.hung_total;
    await loadDlq();
    $('dlq-count').textContent = o.stats.dead_letters;
    $('refreshed').textContent = 'refreshed ' + new Date(now).toISOString().slice(11, 19) + ' UTC';
    document.body.setAttribute('data-loaded', String(now));
    showError('');
  } catch (e) { showError(e.message); }
}

async function start() {
  state.session = await api('/api/session');
  $('backend').textContent = state.session.backend;
  const mode = $('mode');
  mode.textContent = state.session.actions_enabled ? 'actions enabled (token required)'
                                                   : state.session.actions_disabled_because;
  mode.className = 'badge ' + (state.session.actions_enabled ? 'ok' : 'warn');
  for (const id of ['replay-dry-run', 'discard']) $(id).disabled = !state.session.actions_enabled;
  $('token').value = sessionStorage.getItem('jobpact-token') || '';
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem('jobpact-token', $('token').value);
  });
  $('dlq-filter').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try { await loadDlq(); showError(''); } catch (e) { showError('DLQ filter: ' + e.message); }
  });
  $('replay-dry-run').addEventListener('click', () => replay(true));
  $('replay-confirm').addEventListener('click', () => replay(false));
  $('discard').addEventListener('click', discard);
  await refresh();
  setInterval(refresh, REFRESH_MS);
}

document.addEventListener('DOMContentLoaded', () => {
  start().catch((e) => showError('cannot reach the endpoint: ' + e.message));
});
