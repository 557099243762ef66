import type { Context } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { ApiError } from '../http/errors.ts';
import { seesEmail } from '../http/access.ts';
import { escapeHtml, htmlPage, randomNonce } from '../http/html.ts';
import { signInUrls } from '../platform/config.ts';

/**
 * GET /admin: the built-in admin page. It draws the funnel and the weekly trends from GET /admin/analytics
 * (same origin, the admin's session cookie) as inline SVG; no script or style comes from anywhere else, so it
 * works offline and under a strict CSP (scripts by nonce only).
 *
 * Access: a signed-in platform admin sees the page. Anyone else gets a small page with the status the API would
 * give (401 with a link to the sign-in page when signed out, 403 when signed in without the role), not a
 * redirect: the sign-in page cannot send the visitor back here, and a page that says why is clearer. A client
 * that does not ask for HTML gets the API's JSON error envelope instead.
 *
 * The page's own query (`?from&to&agentId`) is passed on to the analytics endpoint, so a link can open a window.
 * With an agent named, it also lists the agent's webhook endpoints and their latest deliveries (the agent-webhook
 * admin routes, functions/webhooks/routes.ts).
 *
 * A link from another site opens the page signed in (the admin sees where they land), but the page then loads
 * nothing until the admin presses Show: review 22 found that a page of another site could navigate a popup it opened
 * to `/admin?from=2021-11-22&to=2026-11-20` again and again, without a click, and each load ran the five-year window
 * with a same-origin fetch the API takes as the admin's (and, one at a time per admin, kept the admin's own analytics
 * at 429). Whether the page was opened by the admin is the API's own rule (`requestOfTheUser`, security rule 29).
 */
export async function adminPage(c: Context<AppEnv>): Promise<Response> {
  const wantsHtml = (c.req.header('accept') ?? '').includes('text/html');
  let principal;
  try {
    principal = await c.var.deps.authenticator.authenticate(c.req.raw, { page: true });
  } catch (err) {
    // Invalid, expired or revoked credentials: the same as signed out.
    if (!(err instanceof ApiError) || err.code !== 'UNAUTHORIZED') throw err;
    principal = null;
  }
  const { signInUrl } = signInUrls(c.var.deps.config);
  if (!principal) {
    if (!wantsHtml) throw new ApiError('UNAUTHORIZED', 'Sign in to continue', signInUrls(c.var.deps.config));
    return page(c, 401, 'Sign in to continue', `<p>The admin page is for platform admins. <a id="sign-in" href="${escapeHtml(signInUrl)}">Sign in</a>, then open this page again.</p>`);
  }
  if (principal.role !== 'platform_admin') {
    if (!wantsHtml) throw new ApiError('FORBIDDEN', 'This action needs the platform_admin role');
    // The address only to whom it may be told: an agent's token without the email scope learned it here (review 40).
    const who = seesEmail(principal) ? `as ${escapeHtml(principal.email)}, which is` : 'with an account that is';
    return page(c, 403, 'Not allowed', `<p>You are signed in ${who} not a platform admin account.</p>`);
  }
  const nonce = randomNonce();
  const openedByTheAdmin = c.var.deps.authenticator.requestOfTheUser(c.req.raw);
  return page(c, 200, 'Marketplace analytics', dashboard(nonce, openedByTheAdmin), nonce);
}

/** `load`: run the window of the page's URL at once (false when another site's page opened it: it waits for Show). */
function dashboard(nonce: string, load: boolean): string {
  return `
  <form id="window" data-load="${load ? 'now' : 'on-submit'}">
    <label>From <input name="from" id="from" placeholder="YYYY-MM-DD" size="24"></label>
    <label>To <input name="to" id="to" placeholder="YYYY-MM-DD (inclusive)" size="24"></label>
    <label>Agent id <input name="agentId" id="agentId" placeholder="all agents" size="38"></label>
    <button type="submit">Show</button>
    <span id="status" role="status">Loading…</span>
  </form>
  <section>
    <h2>Funnel <small id="window-text"></small></h2>
    <svg id="funnel-chart" role="img" aria-label="Funnel: purchased, activated, used" width="720" height="170" viewBox="0 0 720 170"></svg>
  </section>
  <section>
    <h2>Weekly trends</h2>
    <p class="legend"><span class="key new"></span>New subscriptions <span class="key cancel"></span>Cancellations <span class="key active"></span>Active at week end</p>
    <svg id="trends-chart" role="img" aria-label="Weekly new subscriptions, cancellations and active subscriptions" width="720" height="300" viewBox="0 0 720 300"></svg>
  </section>
  <section>
    <h2>Per agent</h2>
    <table id="per-agent"><thead><tr><th>Agent</th><th>Purchased</th><th>Activated</th><th>Used</th></tr></thead><tbody></tbody></table>
  </section>
  <section id="webhooks" hidden>
    <h2>Agent webhooks <small>endpoints of the agent above, with their latest deliveries</small></h2>
    <p id="webhooks-status" role="status"></p>
    <div id="webhook-list"></div>
  </section>
  <script nonce="${nonce}">
  (() => {
    const NS = 'http://www.w3.org/2000/svg';
    const $ = (id) => document.getElementById(id);
    const el = (name, attrs, text) => {
      const node = document.createElementNS(NS, name);
      for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
      if (text !== undefined) node.textContent = String(text);
      return node;
    };
    const pct = (part, whole) => (whole ? Math.round((part / whole) * 100) + '%' : '–');

    function drawFunnel(funnel) {
      const svg = $('funnel-chart');
      svg.replaceChildren();
      const stages = [['purchased', 'Purchased'], ['activated', 'Activated'], ['used', 'Used']];
      const max = Math.max(1, funnel.purchased);
      stages.forEach(([key, label], i) => {
        const value = funnel[key];
        const y = 10 + i * 52;
        const width = Math.max(2, Math.round((value / max) * 480));
        const g = el('g', { 'data-stage': key, 'data-value': value });
        g.append(el('text', { x: 0, y: y + 26, class: 'label' }, label));
        g.append(el('rect', { x: 110, y, width, height: 40, rx: 4, class: 'bar ' + key }));
        g.append(el('text', { x: 118 + width, y: y + 26, class: 'value' }, value + (i ? '  (' + pct(value, funnel.purchased) + ')' : '')));
        svg.append(g);
      });
    }

    function drawTrends(trends) {
      const svg = $('trends-chart');
      svg.replaceChildren();
      const left = 44, top = 12, width = 660, height = 240;
      const max = Math.max(1, ...trends.flatMap((t) => [t.newSubscriptions, t.cancellations, t.active]));
      const y = (v) => top + height - (v / max) * height;
      const step = width / Math.max(1, trends.length);
      const bar = Math.max(2, Math.min(18, step / 3));
      svg.append(el('line', { x1: left, y1: top + height, x2: left + width, y2: top + height, class: 'axis' }));
      for (const tick of new Set([0, Math.round(max / 2), max])) {
        svg.append(el('text', { x: left - 6, y: y(tick) + 4, class: 'tick', 'text-anchor': 'end' }, tick));
      }
      const points = [];
      trends.forEach((t, i) => {
        const cx = left + step * i + step / 2;
        const g = el('g', { class: 'week', 'data-week': t.week, 'data-new': t.newSubscriptions, 'data-cancellations': t.cancellations, 'data-active': t.active });
        g.append(el('rect', { x: cx - bar, y: y(t.newSubscriptions), width: bar, height: top + height - y(t.newSubscriptions), class: 'bar new' }));
        g.append(el('rect', { x: cx, y: y(t.cancellations), width: bar, height: top + height - y(t.cancellations), class: 'bar cancel' }));
        g.append(el('circle', { cx, cy: y(t.active), r: 3, class: 'point active' }));
        g.append(el('title', {}, t.week + ': ' + t.newSubscriptions + ' new, ' + t.cancellations + ' canceled, ' + t.active + ' active'));
        if (trends.length <= 16 || i % Math.ceil(trends.length / 16) === 0) {
          g.append(el('text', { x: cx, y: top + height + 16, class: 'tick', 'text-anchor': 'middle' }, t.week.slice(5)));
        }
        svg.append(g);
        points.push(cx + ',' + y(t.active));
      });
      if (points.length) svg.append(el('polyline', { points: points.join(' '), class: 'line active' }));
    }

    function drawTable(perAgent) {
      const body = $('per-agent').tBodies[0];
      body.replaceChildren();
      for (const a of perAgent) {
        const row = document.createElement('tr');
        row.dataset.agentId = a.agentId;
        for (const text of [a.name + ' (' + a.slug + ')', a.purchased, a.activated, a.used]) {
          const cell = document.createElement('td');
          cell.textContent = String(text);
          row.append(cell);
        }
        body.append(row);
      }
    }

    async function getData(path) {
      const res = await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } });
      const body = await res.json().catch(() => null);
      if (!res.ok || !body || body.status !== 'success') {
        throw new Error((body && body.error && body.error.message) || 'Request failed (' + res.status + ')');
      }
      return body.data;
    }

    function cell(row, text, className) {
      const td = document.createElement('td');
      td.textContent = text === null || text === undefined ? '' : String(text);
      if (className) td.className = className;
      row.append(td);
    }

    // The agent's webhook endpoints (GET /admin/agents/{id}/webhooks) and each one's latest deliveries
    // (GET .../deliveries?limit=10), shown when the form names an agent. Text only: nothing from the API becomes HTML.
    async function loadWebhooks(agentId) {
      const section = $('webhooks');
      const list = $('webhook-list');
      list.replaceChildren();
      section.hidden = !agentId;
      if (!agentId) return;
      section.dataset.state = 'loading';
      $('webhooks-status').textContent = 'Loading…';
      try {
        const base = '/admin/agents/' + encodeURIComponent(agentId) + '/webhooks';
        const hooks = await getData(base);
        for (const hook of hooks) {
          const deliveries = await getData(base + '/' + encodeURIComponent(hook.id) + '/deliveries?limit=10');
          const box = document.createElement('div');
          box.className = 'webhook';
          box.dataset.webhookId = hook.id;
          const title = document.createElement('h3');
          title.textContent = hook.url + (hook.enabled ? '' : ' (disabled)');
          const events = document.createElement('p');
          events.className = 'events';
          events.textContent = 'Events: ' + hook.events.join(', ');
          const table = document.createElement('table');
          table.className = 'deliveries';
          const head = table.createTHead().insertRow();
          for (const h of ['Created', 'Event', 'Status', 'Attempts', 'Last answer', 'Next attempt']) {
            const th = document.createElement('th');
            th.textContent = h;
            head.append(th);
          }
          const tbody = table.createTBody();
          for (const d of deliveries) {
            const row = tbody.insertRow();
            row.dataset.deliveryId = d.id;
            row.dataset.status = d.status;
            cell(row, d.createdAt.replace('T', ' ').slice(0, 19));
            cell(row, d.eventType);
            cell(row, d.status, 'status ' + d.status);
            cell(row, d.attempts);
            cell(row, d.lastError || (d.lastStatusCode !== null ? d.lastStatusCode : ''));
            cell(row, d.nextAttemptAt ? d.nextAttemptAt.replace('T', ' ').slice(0, 19) : '');
          }
          if (!deliveries.length) {
            const row = tbody.insertRow();
            cell(row, 'No deliveries yet');
            row.cells[0].colSpan = 6;
          }
          box.append(title, events, table);
          list.append(box);
        }
        $('webhooks-status').textContent = hooks.length ? '' : 'This agent has no webhook endpoints.';
        section.dataset.state = 'ready';
      } catch (err) {
        $('webhooks-status').textContent = err.message;
        section.dataset.state = 'error';
      }
    }

    async function load(query) {
      loadWebhooks(new URLSearchParams(query).get('agentId'));
      document.body.dataset.state = 'loading';
      $('status').textContent = 'Loading…';
      const res = await fetch('/admin/analytics' + (query ? '?' + query : ''), { credentials: 'same-origin', headers: { accept: 'application/json' } });
      const body = await res.json().catch(() => null);
      if (!res.ok || !body || body.status !== 'success') {
        document.body.dataset.state = 'error';
        $('status').textContent = (body && body.error && body.error.message) || 'Could not load analytics (' + res.status + ')';
        return;
      }
      const data = body.data;
      $('window-text').textContent = data.from.slice(0, 10) + ' – ' + data.to.slice(0, 10);
      drawFunnel(data.funnel);
      drawTrends(data.trends);
      drawTable(data.perAgent);
      $('status').textContent = '';
      document.body.dataset.state = 'ready';
    }

    const initial = new URLSearchParams(location.search);
    for (const name of ['from', 'to', 'agentId']) if (initial.get(name)) $(name).value = initial.get(name);
    $('window').addEventListener('submit', (event) => {
      event.preventDefault();
      const query = new URLSearchParams();
      for (const name of ['from', 'to', 'agentId']) if ($(name).value) query.set(name, $(name).value.trim());
      history.replaceState(null, '', '?' + query);
      load(query.toString());
    });
    if ($('window').dataset.load === 'now') load(initial.toString());
    else {
      document.body.dataset.state = 'waiting';
      $('status').textContent = 'Opened from another site: press Show to load this window.';
    }
  })();
  </script>`;
}

function page(c: Context<AppEnv>, status: 200 | 401 | 403, title: string, body: string, nonce?: string): Response {
  return htmlPage(c, status, {
    title,
    titleSuffix: ' · Agent Marketplace admin',
    head: '  <link rel="icon" href="data:,">\n',
    style: STYLE,
    body,
    nonce,
    directives: ["img-src 'self' data:", "form-action 'self'"],
  });
}

const STYLE = `    body { font-family: system-ui, sans-serif; max-width: 760px; margin: 2rem auto; padding: 0 1rem; color: #1b1b1f; }
    h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem; } h2 small { font-weight: normal; color: #666; }
    form label { margin-right: .6rem; font-size: .9rem; }
    #status { color: #b3261e; margin-left: .6rem; }
    svg text { font-size: 12px; fill: #1b1b1f; } svg .tick { fill: #666; font-size: 10px; }
    .axis { stroke: #999; }
    .bar.purchased { fill: #3b4cca; } .bar.activated { fill: #5b8def; } .bar.used { fill: #2e9d6a; }
    .bar.new { fill: #2e9d6a; } .bar.cancel { fill: #c8452f; }
    .line.active { fill: none; stroke: #3b4cca; stroke-width: 2; } .point.active { fill: #3b4cca; }
    .legend { font-size: .85rem; } .key { display: inline-block; width: .8rem; height: .8rem; margin: 0 .3rem 0 .9rem; vertical-align: middle; }
    .key.new { background: #2e9d6a; } .key.cancel { background: #c8452f; } .key.active { background: #3b4cca; }
    table { border-collapse: collapse; width: 100%; font-size: .9rem; }
    th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #e4e4ea; }
    .webhook h3 { font-size: 1rem; margin: 1.2rem 0 .2rem; word-break: break-all; } .webhook .events { margin: 0 0 .4rem; font-size: .85rem; color: #555; }
    td.status.delivered { color: #2e9d6a; } td.status.failed { color: #b3261e; } td.status.pending { color: #8a6d00; }`;
