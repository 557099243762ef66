import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { openPostgres } from '../../functions/platform/db.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import type { TestApp } from '../../tests/support/app.ts';
import { HttpClient } from '../../tests/support/http.ts';
import { accessTokenFor } from '../../tests/support/oauth.ts';
import { sessionCookie } from '../../tests/support/users.ts';
import { startStripeFake } from '../../tests/stripe-fake/server.ts';
import { createDatabase, createOAuthAgent, signInAdmin } from '../bench/lib.ts';
import { freePort, startPostgres } from '../postgres-server.ts';
import { Balancer, CutProxy, FaultyProxy, HookReceiver, killInstance, logSummary, MailSink, startInstance, stopInstance, type Instance } from './lib.ts';

/**
 * The fault drill (issue 14): `npx tsx scripts/chaos/drill.ts [--quick]`. Not part of `npm test`; needs the
 * PostgreSQL server binaries (as the tests do) and about 1.5 GB of memory; takes about 8 minutes (3 with --quick).
 *
 * The service as it runs in production: a durable PostgreSQL (fsync on, on disk), three instances of the Node entry
 * (scripts/serve.ts, NODE_ENV=production) behind a round-robin balancer, their database connections through a TCP
 * proxy (so the network can fail), a real SMTP server, the Stripe fake behind a proxy that can fail, and agent
 * webhook receivers. Load: closed-loop metering increments with bearer tokens from the real OAuth flow (each agent's
 * own client), retried with the same clientReqId until answered (as an agent backend should), plus a trickle of
 * sign-ups (mail), free subscriptions (webhooks), paid checkouts (Stripe) and a scheduler calling POST /internal/drain.
 *
 * Faults, in turn: kill -9 of the database and a restart; connections cut at random for 30 s; SMTP down for 60 s;
 * Stripe answering 500 for 60 s; kill -9 of one instance. Per fault it prints the answers by status (5xx other than
 * 503 are the service's failures; the balancer's own 502 for requests an instance died holding are counted apart),
 * the time to recover, and the audit: every increment acknowledged with 200 is in the ledger exactly once, every
 * counter equals its ledger sum, no counter is over its quota, and every queued mail and webhook was delivered once.
 * Exits 1 when any check fails.
 */

const QUICK = process.argv.includes('--quick');
const T = QUICK
  ? { warm: 3, dbDown: 5, cuts: 10, smtp: 15, stripe: 15, afterKill: 5, settleMax: 150 }
  : { warm: 5, dbDown: 10, cuts: 30, smtp: 60, stripe: 60, afterKill: 10, settleMax: 180 };
const WORKERS = 8;
const USERS = 6;
/** Metering agents: their quotas (per subscription). Small ones are exhausted during the run (429 from then on). */
const QUOTAS = [300, 1500, 1_000_000_000];
const SECRET = 'chaos-drill-secret-chaos-drill-secret-0123';
const DRAIN_TOKEN = 'chaos-drill-drain-token-0123456789abcdef';
const ADMIN = { email: 'chaos-admin@example.com', password: 'chaos admin password' };

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();
const secs = (ms: number) => (ms / 1000).toFixed(1);

// ---------------------------------------------------------------- what the clients saw

interface Tally {
  byStatus: Map<string, number>;
  /** 5xx answered by the service other than 503 */
  serviceFailures: number;
  /** the balancer's 502 for a request an instance took and died with */
  balancerLost: number;
  /** no answer at all (connection error, timeout) */
  unanswered: number;
  /** increments given up after retrying for a minute */
  givenUp: number;
  examples: string[];
}

const newTally = (): Tally => ({ byStatus: new Map(), serviceFailures: 0, balancerLost: 0, unanswered: 0, givenUp: 0, examples: [] });
let tally = newTally();

function record(what: string, res: Response | undefined, body?: string) {
  if (!res) {
    tally.unanswered++;
    tally.byStatus.set(`${what} no answer`, (tally.byStatus.get(`${what} no answer`) ?? 0) + 1);
    return;
  }
  const key = `${what} ${res.status}`;
  tally.byStatus.set(key, (tally.byStatus.get(key) ?? 0) + 1);
  if (res.status >= 500 && res.headers.get('x-balancer')) tally.balancerLost++;
  else if (res.status >= 500 && res.status !== 503) {
    tally.serviceFailures++;
    if (tally.examples.length < 5) tally.examples.push(`${what} ${res.status} ${body?.slice(0, 200) ?? ''}`);
  }
}

async function call(base: string, path: string, init: RequestInit & { what: string }): Promise<{ res: Response | undefined; body: string }> {
  try {
    const res = await fetch(base + path, { ...init, signal: AbortSignal.timeout(30_000) });
    const body = await res.text();
    record(init.what, res, body);
    return { res, body };
  } catch {
    record(init.what, undefined);
    return { res: undefined, body: '' };
  }
}

// ---------------------------------------------------------------- the load

interface Pair {
  agentId: string;
  token: string;
  quota: number;
}

/** clientReqId -> pair index, for every increment answered 200 */
const acknowledged = new Map<string, number>();
let lastAckAt = 0;
let running = true;
let sequence = 0;

async function incrementWorker(base: string, pairs: Pair[], worker: number) {
  while (running) {
    const p = (worker * 7 + sequence) % pairs.length;
    const key = `k-${worker}-${sequence++}`;
    const pair = pairs[p]!;
    const started = now();
    for (;;) {
      const { res, body } = await call(base, `/me/usage/${pair.agentId}/calls/increment`, {
        what: 'increment',
        method: 'POST',
        headers: { authorization: `Bearer ${pair.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ clientReqId: key }),
      });
      if (res?.status === 200) {
        acknowledged.set(key, p);
        lastAckAt = now();
        break;
      }
      if (res && res.status < 500 && res.status !== 408) {
        if (res.status !== 429) tally.examples.length < 5 && tally.examples.push(`increment ${res.status} ${body.slice(0, 200)}`);
        break; // 429 QUOTA_EXCEEDED (or a refusal): a final answer
      }
      // 503, the balancer's 502, a 500, no answer: the same clientReqId again, as an agent backend would
      if (now() - started > 60_000) {
        tally.givenUp++;
        break;
      }
      await pause(100);
    }
  }
}

interface Side {
  paidTierId: string;
  hookedFreeTierId: string;
}

let lastPaidCheckoutAt = 0;
/** Session cookies of new users, each used once for a paid checkout (a new customer: the service must call Stripe). */
const payers: string[] = [];

/**
 * Mail and webhooks: a sign-up (the verification mail) every second or so, then sign-in and a free subscription to
 * the agent whose endpoint wants subscription.created (a webhook).
 */
async function newUsers(base: string, side: Side) {
  let n = 0;
  while (running) {
    n++;
    const email = `chaos-user-${n}-${Math.random().toString(36).slice(2, 8)}@example.com`;
    const password = `chaos password ${n}`;
    const up = await call(base, '/api/auth/sign-up/email', {
      what: 'sign-up',
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password, name: `Chaos ${n}` }),
    });
    if (up.res?.status === 200) {
      const signedIn = await call(base, '/api/auth/sign-in/email', {
        what: 'sign-in',
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email, password }),
      });
      if (signedIn.res?.status === 200) {
        const cookie = sessionCookie(signedIn.res.headers);
        await call(base, '/me/checkout', {
          what: 'free checkout',
          method: 'POST',
          headers: { 'content-type': 'application/json', cookie },
          body: JSON.stringify({ tierId: side.hookedFreeTierId }),
        });
        payers.push(cookie);
      }
    }
    await pause(500);
  }
}

/** Stripe: a paid checkout by a user who has none yet, every second or so. */
async function paidCheckouts(base: string, side: Side) {
  while (running) {
    const cookie = payers.shift();
    if (cookie) {
      const paid = await call(base, '/me/checkout', {
        what: 'paid checkout',
        method: 'POST',
        headers: { 'content-type': 'application/json', cookie },
        body: JSON.stringify({ tierId: side.paidTierId }),
      });
      if (paid.res?.status === 201 || paid.res?.status === 200) lastPaidCheckoutAt = now();
      // refused by Stripe's outage: the same user tries again later
      else if (paid.res?.status === 503) payers.push(cookie);
    }
    await pause(700);
  }
}

/** The scheduler (on Supabase: pg_cron through pg_net), every 3 s. */
async function scheduler(base: string) {
  while (running) {
    await call(base, '/internal/drain', { what: 'drain', method: 'POST', headers: { authorization: `Bearer ${DRAIN_TOKEN}` } });
    await pause(3000);
  }
}

// ---------------------------------------------------------------- the audit

interface Audit {
  acknowledged: number;
  lost: number;
  countedTwice: number;
  counterMismatch: number;
  overQuota: number;
  mailPending: number;
  mailFailed: number;
  mailSent: number;
  mailMissing: number;
  mailDuplicated: number;
  webhooksPending: number;
  webhooksDelivered: number;
  webhooksMissing: number;
  webhooksDuplicated: number;
  settledInMs: number;
}

/**
 * The audit of everything so far. Load goes on meanwhile: mail and webhooks written after `cutoff` (the start of the
 * audit) are the next audit's business.
 */
async function audit(db: postgres.Sql, mail: MailSink, hooks: HookReceiver): Promise<Audit> {
  const cutoff = new Date();
  // Outboxes first: wait (bounded) until nothing written before the cutoff is pending, as the loops and the
  // scheduler drain them.
  const started = now();
  for (;;) {
    const [o] = await db`select (select count(*)::int from mail_outbox where status = 'pending' and created_at <= ${cutoff}) as mails,
                                (select count(*)::int from public.webhook_deliveries where status = 'pending' and created_at <= ${cutoff}) as hooks`;
    if ((o!.mails === 0 && o!.hooks === 0) || now() - started > T.settleMax * 1000) break;
    await pause(500);
  }
  const settledInMs = now() - started;
  const keys = [...acknowledged.keys()];
  const found = new Map<string, number>();
  for (let i = 0; i < keys.length; i += 5000) {
    const batch = keys.slice(i, i + 5000);
    for (const r of await db`select client_req_id, count(*)::int as n from quota_ledger
                             where event = 'increment' and client_req_id = any(${batch}::text[]) group by client_req_id`) {
      found.set(r.client_req_id, r.n);
    }
  }
  const lost = keys.filter((k) => !found.has(k)).length;
  const countedTwice = [...found.values()].filter((n) => n > 1).length;
  const [c] = await db`
    select
      (select count(*)::int from usage_counters c
         where c.used <> coalesce((select sum(l.delta) from quota_ledger l where l.subscription_id = c.subscription_id
                                     and l.metric_id = c.metric_id and l.period_start = c.period_start), 0)) as mismatch,
      (select count(*)::int from usage_counters c join subscriptions s on s.id = c.subscription_id
         where c.used > coalesce(public.metering_effective_limit(s.id, s.tier_id, c.metric_id, c.period_start), c.used)) as over`;
  // Every mail marked sent arrived (the server has it before it answers 250); none arrived more often than the
  // outbox holds mails for its address (a mail in flight may have arrived before it is marked sent).
  const all = await db`select lower(to_address) as to, status, created_at <= ${cutoff} as due from mail_outbox`;
  const mails = all.filter((m) => m.due);
  let mailMissing = 0;
  let mailDuplicated = 0;
  const sent = new Map<string, number>();
  const written = new Map<string, number>();
  for (const m of all) {
    written.set(m.to, (written.get(m.to) ?? 0) + 1);
    if (m.status === 'sent') sent.set(m.to, (sent.get(m.to) ?? 0) + 1);
  }
  for (const [to, n] of written) {
    const got = mail.received.get(to) ?? 0;
    if (got < (sent.get(to) ?? 0)) mailMissing += (sent.get(to) ?? 0) - got;
    if (got > n) mailDuplicated += got - n;
  }
  const deliveries = await db`select d.event_id::text as event_id, d.status from public.webhook_deliveries d where d.created_at <= ${cutoff}`;
  let webhooksMissing = 0;
  let webhooksDuplicated = 0;
  for (const d of deliveries) {
    if (d.status !== 'delivered') continue;
    const got = hooks.accepted.get(d.event_id) ?? 0;
    if (got === 0) webhooksMissing++;
    if (got > 1) webhooksDuplicated += got - 1;
  }
  return {
    acknowledged: keys.length,
    lost,
    countedTwice,
    counterMismatch: c!.mismatch,
    overQuota: c!.over,
    mailPending: mails.filter((m) => m.status === 'pending').length,
    mailFailed: mails.filter((m) => m.status === 'failed').length,
    mailSent: mails.filter((m) => m.status === 'sent').length,
    mailMissing,
    mailDuplicated,
    webhooksPending: deliveries.filter((d) => d.status === 'pending').length,
    webhooksDelivered: deliveries.filter((d) => d.status === 'delivered').length,
    webhooksMissing,
    webhooksDuplicated,
    settledInMs,
  };
}

function auditProblems(a: Audit): string[] {
  const problems: string[] = [];
  if (a.lost) problems.push(`${a.lost} acknowledged increments missing from the ledger`);
  if (a.countedTwice) problems.push(`${a.countedTwice} increments in the ledger twice`);
  if (a.counterMismatch) problems.push(`${a.counterMismatch} counters differ from their ledger sum`);
  if (a.overQuota) problems.push(`${a.overQuota} counters over their quota`);
  if (a.mailPending || a.mailFailed) problems.push(`${a.mailPending} mails pending, ${a.mailFailed} failed after the fault`);
  if (a.mailMissing || a.mailDuplicated) problems.push(`${a.mailMissing} sent mails not received, ${a.mailDuplicated} received twice`);
  if (a.webhooksPending) problems.push(`${a.webhooksPending} webhook deliveries pending after the fault`);
  if (a.webhooksMissing || a.webhooksDuplicated) problems.push(`${a.webhooksMissing} delivered webhooks not received, ${a.webhooksDuplicated} received twice`);
  return problems;
}

// ---------------------------------------------------------------- main

interface PhaseResult {
  fault: string;
  tally: Tally;
  recovery: string;
  audit: Audit;
  problems: string[];
}

async function main() {
  const started = new Date();
  const logDir = mkdtempSync(join(tmpdir(), 'mkt-chaos-'));
  console.log(`fault drill${QUICK ? ' (--quick)' : ''}: logs in ${logDir}`);
  const server = await startPostgres({ durable: true, maxConnections: 200 });
  const stripe = await startStripeFake();
  const stripeProxy = await new FaultyProxy(stripe.url).listen();
  const mail = new MailSink(await freePort());
  await mail.start();
  const hooks = await new HookReceiver().listen();
  const balancer = await new Balancer().listen();
  const instances: Instance[] = [];
  let admin: postgres.Sql | undefined;
  const results: PhaseResult[] = [];
  let exitCode = 0;
  try {
    const dbUrl = await createDatabase(server.url, 'marketplace');
    const database = openPostgres(dbUrl, { max: 1 });
    await migrate(database);
    await database.close();
    const cutProxy = await new CutProxy({ host: '127.0.0.1', port: server.port }).listen();
    const serviceDbUrl = dbUrl.replace(`:${server.port}/`, `:${cutProxy.port}/`);
    admin = postgres(dbUrl, { max: 2, onnotice: () => {} });

    const env = {
      NODE_ENV: 'production',
      DATABASE_URL: serviceDbUrl,
      DATABASE_POOL_SIZE: '10',
      PUBLIC_BASE_URL: balancer.url,
      AUTH_SECRET: SECRET,
      ADMIN_EMAIL: ADMIN.email,
      ADMIN_PASSWORD: ADMIN.password,
      AUTH_RATE_LIMIT_PER_MINUTE: '0',
      SMTP_URL: mail.url,
      MAIL_FROM: 'Chaos Drill <drill@example.com>',
      STRIPE_SECRET_KEY: stripe.secretKey,
      STRIPE_WEBHOOK_SECRET: stripe.webhookSecret,
      STRIPE_API_URL: stripeProxy.url,
      DRAIN_TOKEN,
    };
    for (const name of ['instance-1', 'instance-2', 'instance-3']) {
      instances.push(await startInstance(name, await freePort(), { ...env, DATA_DIR: join(logDir, name) }, logDir));
    }
    balancer.setUpstreams(instances.map((i) => i.url));
    const base = balancer.url;
    console.log(`PostgreSQL 15 (durable) at :${server.port}, 3 instances behind ${base}, SMTP :${mail.port}, Stripe fake behind ${stripeProxy.url}`);

    // ---- setup through the API: agents with their OAuth clients, users, tokens, subscriptions, endpoints, a paid tier
    const http = new HttpClient(base);
    const adminCookie = await signInAdmin(http, base, ADMIN);
    const t = { http, baseUrl: base } as unknown as TestApp;
    const metered: Array<{ agentId: string; client: Awaited<ReturnType<typeof createOAuthAgent>>; tierId: string; quota: number }> = [];
    for (const [i, quota] of QUOTAS.entries()) {
      const client = await createOAuthAgent(http, base, adminCookie, { slug: `chaos-metered-${i}`, name: `Chaos Metered ${i}` });
      const [tier] = await admin`
        with a as (update agents set status = 'active' where id = ${client.agentId} returning id),
             tier as (insert into tiers (agent_id, name, price_cents) select id, 'Free', 0 from a returning id),
             metric as (insert into metric_definitions (agent_id, slug, name, kind) select id, 'calls', 'Calls', 'rolling' from a returning id)
        insert into tier_quotas (tier_id, metric_id, quota_limit) select tier.id, metric.id, ${quota} from tier, metric
        returning tier_id`;
      metered.push({ agentId: client.agentId, client, tierId: tier!.tier_id, quota });
    }
    // webhook endpoints: every metered agent (usage thresholds) and the agent new users subscribe to
    const hooked = await createOAuthAgent(http, base, adminCookie, { slug: 'chaos-hooked', name: 'Chaos Hooked' });
    const [hookedTier] = await admin`
      with a as (update agents set status = 'active' where id = ${hooked.agentId} returning id)
      insert into tiers (agent_id, name, price_cents) select id, 'Free', 0 from a returning id`;
    for (const [i, agentId] of [...metered.map((m) => m.agentId), hooked.agentId].entries()) {
      const res = await http.post(`/admin/agents/${agentId}/webhooks`, {
        cookie: adminCookie,
        headers: { origin: base },
        json: { url: `${hooks.url}/hooks/${i}`, events: ['subscription.created', 'usage.threshold_reached'] },
      });
      if (res.status !== 201) throw new Error(`createAgentWebhook: ${res.status} ${res.text}`);
      hooks.secrets.set(`/hooks/${i}`, res.body.data.secret);
    }
    // a paid tier (a Stripe product and price in the fake)
    const paidAgent = await createOAuthAgent(http, base, adminCookie, { slug: 'chaos-paid', name: 'Chaos Paid' });
    await admin`update agents set status = 'active' where id = ${paidAgent.agentId}`;
    const paid = await http.post(`/agents/${paidAgent.agentId}/pricing`, {
      cookie: adminCookie,
      headers: { origin: base },
      json: { name: 'Pro', priceCents: 2000, currency: 'usd', interval: 'month', isPublic: true, features: ['More'] },
    });
    if (paid.status !== 201) throw new Error(`createTier: ${paid.status} ${paid.text}`);

    const pairs: Pair[] = [];
    for (let u = 0; u < USERS; u++) {
      const user = { email: `chaos-load-${u}@example.com`, password: `chaos load password ${u}`, name: `Chaos Load ${u}` };
      const up = await http.post('/api/auth/sign-up/email', { json: user });
      if (up.status !== 200) throw new Error(`sign-up: ${up.status} ${up.text}`);
      const signedIn = await http.post('/api/auth/sign-in/email', { json: { email: user.email, password: user.password } });
      if (signedIn.status !== 200) throw new Error(`sign-in: ${signedIn.status} ${signedIn.text}`);
      const cookie = sessionCookie(signedIn.headers);
      for (const m of metered) {
        const sub = await http.post('/me/checkout', { cookie, json: { tierId: m.tierId } });
        if (sub.status !== 201) throw new Error(`checkout: ${sub.status} ${sub.text}`);
        const tokens = await accessTokenFor(t, { userId: up.body.user.id, ...user, cookie }, { client: { ...m.client } });
        pairs.push({ agentId: m.agentId, token: tokens.accessToken, quota: m.quota });
      }
    }
    console.log(`setup: ${pairs.length} metered subscriptions (${USERS} users x ${QUOTAS.length} agents, quotas ${QUOTAS.join(', ')}), bearer tokens from each agent's OAuth client; ${hooks.secrets.size} webhook endpoints; a paid tier`);

    // ---- load
    const side: Side = { paidTierId: paid.body.data.id, hookedFreeTierId: hookedTier!.id };
    const load = [
      ...Array.from({ length: WORKERS }, (_, w) => incrementWorker(base, pairs, w)),
      newUsers(base, side),
      paidCheckouts(base, side),
      scheduler(base),
    ];
    await pause(T.warm * 1000);

    const phase = async (fault: string, run: () => Promise<string>) => {
      tally = newTally();
      console.log(`\n${new Date().toISOString().slice(11, 19)}  ${fault}`);
      const recovery = await run();
      await pause(2000);
      const a = await audit(admin!, mail, hooks);
      const problems = [...auditProblems(a), ...(tally.serviceFailures ? [`${tally.serviceFailures} answers 5xx other than 503`] : [])];
      results.push({ fault, tally, recovery, audit: a, problems });
      console.log(`   recovery: ${recovery}`);
      console.log(`   answers: ${[...tally.byStatus].map(([k, v]) => `${k}: ${v}`).join(', ')}`);
      console.log(`   5xx other than 503: ${tally.serviceFailures}; balancer 502 (instance died holding the request): ${tally.balancerLost}; no answer: ${tally.unanswered}; increments given up: ${tally.givenUp}`);
      console.log(
        `   audit: ${a.acknowledged} increments acknowledged so far, ${a.lost} missing from the ledger, ${a.countedTwice} counted twice; ` +
          `${a.counterMismatch} counters off their ledger sum, ${a.overQuota} over quota; mail ${a.mailSent} sent (${a.mailMissing} not received, ${a.mailDuplicated} twice), ` +
          `${a.mailPending} pending, ${a.mailFailed} failed; webhooks ${a.webhooksDelivered} delivered (${a.webhooksMissing} not received, ${a.webhooksDuplicated} twice), ` +
          `${a.webhooksPending} pending; outboxes settled ${secs(a.settledInMs)} s after the fault`,
      );
      for (const e of tally.examples) console.log(`   e.g. ${e}`);
      console.log(problems.length ? `   FAILED: ${problems.join('; ')}` : '   ok');
    };

    const readyAll = async (since: number): Promise<number> => {
      for (;;) {
        const ready = await Promise.all(instances.filter((i) => i.child.exitCode === null && i.child.signalCode === null).map((i) => fetch(`${i.url}/ready`).then((r) => r.ok, () => false)));
        if (ready.every(Boolean)) return now() - since;
        await pause(100);
      }
    };
    const firstAckAfter = async (since: number): Promise<number> => {
      while (lastAckAt < since) await pause(50);
      return lastAckAt - since;
    };

    await phase(`kill -9 the database, restart it after ${T.dbDown} s`, async () => {
      server.crash();
      await pause(T.dbDown * 1000);
      server.start();
      const back = now();
      const [first, ready] = await Promise.all([firstAckAfter(back), readyAll(back)]);
      await pause(5000);
      return `first acknowledged increment ${secs(first)} s after the database accepted connections again; all instances ready after ${secs(ready)} s`;
    });

    await phase(`cut database connections at random for ${T.cuts} s`, async () => {
      const until = now() + T.cuts * 1000;
      let cuts = 0;
      while (now() < until) {
        cuts += cutProxy.cut(0.5);
        await pause(200 + Math.random() * 600);
      }
      const end = now();
      const first = await firstAckAfter(end);
      await pause(3000);
      return `${cuts} connections reset; first acknowledged increment ${secs(first)} s after the cuts stopped`;
    });

    await phase(`stop SMTP for ${T.smtp} s`, async () => {
      const sentBefore = [...mail.received.values()].reduce((a, b) => a + b, 0);
      await mail.stop();
      await pause(T.smtp * 1000);
      await mail.start();
      const back = now();
      for (;;) {
        const [o] = await admin!`select count(*)::int as n from mail_outbox where status = 'pending'`;
        if (o!.n === 0 || now() - back > T.settleMax * 1000) break;
        await pause(250);
      }
      const got = [...mail.received.values()].reduce((a, b) => a + b, 0) - sentBefore;
      return `mail outbox empty ${secs(now() - back)} s after SMTP came back (${got} mails delivered since the stop; the outbox backs off up to 2^n s)`;
    });

    await phase(`Stripe API answers 500 for ${T.stripe} s`, async () => {
      stripeProxy.failing = true;
      const served = stripeProxy.served500;
      await pause(T.stripe * 1000);
      stripeProxy.failing = false;
      const back = now();
      while (lastPaidCheckoutAt < back) await pause(50);
      return `${stripeProxy.served500 - served} Stripe calls answered 500; first paid checkout ${secs(lastPaidCheckoutAt - back)} s after Stripe came back`;
    });

    await phase(`kill -9 one service instance (${instances[2]!.name}), the other two go on`, async () => {
      const killedAt = now();
      killInstance(instances[2]!);
      const first = await firstAckAfter(killedAt);
      await pause(T.afterKill * 1000);
      return `first acknowledged increment ${secs(first)} s after the kill; the balancer skips the dead instance once it refuses a connection`;
    });

    running = false;
    await Promise.all(load);
    await phase('after the drill: load stopped, everything settled', async () => 'no fault');

    // ---- the service never needed a restart: the surviving instances are the processes started at the beginning
    console.log('\ninstances:');
    for (const i of instances) {
      const alive = i.child.exitCode === null && i.child.signalCode === null;
      const s = logSummary(i);
      console.log(`   ${i.name}: ${alive ? 'running since the start' : `ended (${i.child.signalCode ?? i.child.exitCode})`}; log: ${s.errors} error lines (${s.unhandled} unhandled errors), ${s.lostConnectionWarnings} lost-connection warnings${s.firstError ? `; first error: ${s.firstError}` : ''}`);
      if (i !== instances[2] && !alive) results.at(-1)!.problems.push(`${i.name} ended`);
      if (s.unhandled) results.at(-1)!.problems.push(`${i.name} logged ${s.unhandled} unhandled errors`);
    }
  } finally {
    running = false;
    for (const i of instances) await stopInstance(i);
    await admin?.end({ timeout: 1 });
    await balancer.close();
    await hooks.close();
    await mail.stop();
    await stripeProxy.close();
    await stripe.close();
    server.stop();
  }

  const seconds = ((Date.now() - started.getTime()) / 1000).toFixed(0);
  console.log(`\nsummary (${seconds} s, ${QUICK ? 'quick' : 'full'} drill, ${WORKERS} increment workers, 2-core machine shared with other work):`);
  console.table(
    results.map((r) => ({
      fault: r.fault,
      '5xx not 503': r.tally.serviceFailures,
      '503': [...r.tally.byStatus].filter(([k]) => k.endsWith(' 503')).reduce((a, [, v]) => a + v, 0),
      'balancer 502': r.tally.balancerLost,
      'no answer': r.tally.unanswered,
      'acked lost/twice': `${r.audit.lost}/${r.audit.countedTwice}`,
      'over quota': r.audit.overQuota,
      'mail missing/twice': `${r.audit.mailMissing}/${r.audit.mailDuplicated}`,
      'webhooks missing/twice': `${r.audit.webhooksMissing}/${r.audit.webhooksDuplicated}`,
      verdict: r.problems.length ? 'FAILED' : 'ok',
    })),
  );
  for (const r of results) console.log(`${r.fault}: ${r.recovery}`);
  const failed = results.filter((r) => r.problems.length);
  if (failed.length) {
    exitCode = 1;
    console.log(`\n${failed.length} fault(s) FAILED:`);
    for (const r of failed) console.log(`   ${r.fault}: ${r.problems.join('; ')}`);
  } else {
    console.log('\nevery fault: zero 5xx other than 503, zero lost or doubled acknowledged increments, no counter over quota, every mail and webhook delivered once');
    rmSync(logDir, { recursive: true, force: true });
  }
  process.exit(exitCode);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
