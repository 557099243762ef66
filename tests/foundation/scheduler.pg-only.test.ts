import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres, type Database } from '../../functions/platform/db.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import { edgeConfigFile } from '../../scripts/edge-imports.ts';
import { findPostgresBin, freePort, startPostgres, type PostgresServer } from '../../scripts/postgres-server.ts';
import { root } from '../../scripts/supabase-cli.ts';
import { TEST_SECRET, type TestApp } from '../support/app.ts';
import { insertAgent, insertTier } from '../support/fixtures.ts';
import { HttpClient } from '../support/http.ts';
import { startSmtpServer, type TestSmtpServer } from '../support/smtp.ts';
import { signIn, signUp, verifyEmail } from '../support/users.ts';
import { addEndpoint, Receiver } from '../webhooks/support.ts';

/**
 * Background work without a long-lived process (issue 14), with the scheduler doing the scheduling:
 *
 * A PostgreSQL 15 cluster of its own with Debian's postgresql-15-cron preloaded (cron.database_name = marketplace),
 * migrated by the real migrations, which enable pg_cron and schedule the jobs (20261123000700_scheduled_jobs.sql).
 * The edge entry (supabase/functions/api/index.ts) is served under Deno in production mode, where it starts no loop.
 * Through its API a new user's verification mail and an agent webhook (subscription.created) are queued; then the
 * drain job's target goes into "Vault", and the next minute pg_cron runs the job, which POSTs to the function's
 * /internal/drain, which sends the mail over SMTP and the webhook to its receiver. Nobody else calls the drain.
 *
 * Two stand-ins, for extensions Debian does not package: `net.http_post` (pg_net) records the call and makes the same
 * POST with curl (COPY ... FROM PROGRAM, synchronously, where pg_net's worker sends it asynchronously), and
 * `vault.decrypted_secrets` (Supabase Vault) is a plain table. Both are created before the migrations run, as the
 * extensions would be on Supabase, so the migration schedules the drain job exactly as it does there.
 *
 * pg_cron 1.4 (Debian's) schedules by the minute (seconds came with 1.5), so this file waits for the next minute
 * boundary once: up to a minute, while other files run.
 */

const DRAIN_TOKEN = 'scheduler-test-drain-token-0123456789';
const deno = join(root, 'node_modules', '.bin', 'deno');
const entry = join(root, 'supabase', 'functions', 'api', 'index.ts');

/** Stand-ins for pg_net and Supabase Vault (see the header); `curl` is the HTTP client. */
function standIns(curl: string): string {
  return `
    create schema net;
    create table net.requests (
      id bigserial primary key, url text not null, headers jsonb not null, body jsonb, status_code integer,
      requested_at timestamptz not null default clock_timestamp());
    create table net.curl_output (line text);
    create function net.shell_quote(p text) returns text language sql immutable as
      $q$ select '''' || replace(p, '''', '''\\''''') || '''' $q$;
    create function net.http_post(url text, body jsonb default '{}'::jsonb, params jsonb default '{}'::jsonb,
                                  headers jsonb default '{"Content-Type": "application/json"}'::jsonb,
                                  timeout_milliseconds integer default 5000)
    returns bigint language plpgsql as $f$
    declare
      v_id bigint;
      v_command text;
      v_header record;
    begin
      insert into net.requests (url, headers, body) values (url, headers, body) returning id into v_id;
      v_command := ${`'${curl}'`} || ' -sS -o /dev/null -w ' || net.shell_quote('%{http_code}') || ' -X POST --max-time '
                   || greatest(1, timeout_milliseconds / 1000);
      for v_header in select key, value from jsonb_each_text(headers) loop
        v_command := v_command || ' -H ' || net.shell_quote(v_header.key || ': ' || v_header.value);
      end loop;
      v_command := v_command || ' --data-binary ' || net.shell_quote(body::text) || ' ' || net.shell_quote(url);
      delete from net.curl_output;
      execute format('copy net.curl_output (line) from program %L', v_command);
      update net.requests set status_code = (select line::integer from net.curl_output limit 1) where id = v_id;
      return v_id;
    end
    $f$;
    create schema vault;
    create table vault.decrypted_secrets (name text primary key, decrypted_secret text not null);
  `;
}

/** Resolves once `condition` holds (checked every 100 ms; the test's own timeout bounds it). */
async function until(condition: () => Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((r) => setTimeout(r, 100));
}

let server: PostgresServer;
let marketplaceUrl: string;
let admin: postgres.Sql;
let database: Database;

beforeAll(async () => {
  if (!findPostgresBin()) throw new Error('this test starts its own PostgreSQL cluster: install the PostgreSQL server binaries');
  const curl = spawnSync('sh', ['-c', 'command -v curl'], { encoding: 'utf8' }).stdout.trim();
  if (!curl) throw new Error('this test needs curl (the HTTP client of its pg_net stand-in)');
  try {
    server = await startPostgres({
      settings: { shared_preload_libraries: 'pg_cron', 'cron.database_name': 'marketplace', 'cron.use_background_workers': 'on' },
    });
  } catch (err) {
    throw new Error(`PostgreSQL did not start with pg_cron preloaded: install the pg_cron package of your server (Debian: postgresql-15-cron)\n${(err as Error).message}`);
  }
  const bootstrap = postgres(server.url, { max: 1, onnotice: () => {} });
  await bootstrap`create database marketplace`;
  await bootstrap.end();
  marketplaceUrl = server.url.replace(/\/postgres$/, '/marketplace');
  admin = postgres(marketplaceUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(standIns(curl));
  database = openPostgres(marketplaceUrl, { max: 2 });
  await migrate(database);
}, 120_000);

afterAll(async () => {
  await database?.close({ graceSeconds: 1 });
  await admin?.end({ timeout: 1 });
  server?.stop();
});

describe('the migration where pg_cron can run', () => {
  it('enables pg_cron and schedules the housekeeping and the drain request (by name, once)', async () => {
    const jobs = await admin`select jobname, schedule, command, database, active from cron.job order by jobname`;
    expect(jobs).toEqual([
      { jobname: 'marketplace-drain', schedule: '* * * * *', command: 'select public.request_background_drain()', database: 'marketplace', active: true },
      { jobname: 'marketplace-housekeeping', schedule: '* * * * *', command: 'select public.background_housekeeping()', database: 'marketplace', active: true },
    ]);
    // Running the scheduling again (after enabling pg_cron later, say) changes nothing.
    expect((await admin`select public.schedule_background_jobs() as jobs`)[0]!.jobs).toEqual(['marketplace-housekeeping', 'marketplace-drain']);
    expect((await admin`select count(*)::int as n from cron.job`)[0]!.n).toBe(2);
  });

  it('leaves the scheduling functions closed to the Data API roles', async () => {
    const grants = await admin`
      select p.proname, has_function_privilege('anon', p.oid, 'execute') as anon,
             has_function_privilege('authenticated', p.oid, 'execute') as authenticated
      from pg_proc p where p.pronamespace = 'public'::regnamespace
        and p.proname in ('background_housekeeping', 'request_background_drain', 'schedule_background_jobs')
      order by p.proname, p.pronargs`;
    expect(grants).toEqual([
      { proname: 'background_housekeeping', anon: false, authenticated: false }, // () as the job runs it
      { proname: 'background_housekeeping', anon: false, authenticated: false }, // (p_now)
      { proname: 'request_background_drain', anon: false, authenticated: false },
      { proname: 'schedule_background_jobs', anon: false, authenticated: false },
    ]);
  });
});

describe('the edge entry under Deno, with no loop, drained by the scheduled job', () => {
  let child: ChildProcess | undefined;
  let output = '';
  let smtp: TestSmtpServer;
  let hook: Receiver;
  let edge: TestApp;

  beforeAll(async () => {
    smtp = await startSmtpServer();
    hook = await Receiver.start();
    const port = await freePort();
    child = spawn(deno, ['run', '--allow-net', '--allow-env', '--allow-read', '--allow-sys', '--config', edgeConfigFile, entry], {
      cwd: root,
      env: {
        ...process.env,
        DENO_NO_PACKAGE_JSON: '1',
        DENO_NO_UPDATE_CHECK: '1',
        DENO_DIR: process.env.DENO_DIR ?? join(root, 'node_modules', '.cache', 'deno'),
        NO_COLOR: '1',
        DATABASE_URL: '',
        SUPABASE_DB_URL: marketplaceUrl,
        AUTH_SECRET: TEST_SECRET,
        PORT: String(port),
        PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
        FUNCTION_PATH_PREFIX: '',
        // Production, where the Node entry would start its loops: the edge entry must not.
        NODE_ENV: 'production',
        // which the edge refuses to start in without a front end (Supabase serves no HTML from a function)
        FRONTEND_URL: 'https://marketplace.example',
        SMTP_URL: smtp.url,
        DRAIN_TOKEN,
        AUTH_RATE_LIMIT_PER_MINUTE: '0',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    const http = new HttpClient(`http://127.0.0.1:${port}`);
    for (;;) {
      if (child.exitCode !== null) throw new Error(`the edge entry exited (${child.exitCode}):\n${output}`);
      const ready = await http.get('/ready').catch(() => undefined);
      if (ready?.status === 200) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    // The test helpers need only HTTP and the database.
    edge = { http, db: database.db, baseUrl: http.baseUrl } as unknown as TestApp;
  }, 300_000);

  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child!.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    await hook?.close();
    await smtp?.close();
  });

  it('delivers a queued mail and a queued webhook through pg_cron -> pg_net -> POST /internal/drain, and runs the housekeeping', async () => {
    // A mail: signing up queues the verification mail.
    const user = await signUp(edge, {});
    // A webhook: an agent's endpoint (created by a platform admin over the API) and a free subscription to it.
    const promoter = await signUp(edge, { verified: true });
    await admin`update "user" set role = 'platform_admin' where id = ${promoter.userId}`;
    const platformAdmin = await signIn(edge, promoter);
    const agent = await insertAgent(database.db);
    const tier = await insertTier(database.db, agent.id);
    await addEndpoint(edge, platformAdmin, agent.id, hook, ['subscription.created']);
    await verifyEmail(edge, user.email);
    const buyer = await signIn(edge, user);
    const checkout = await edge.http.post('/me/checkout', { cookie: buyer.cookie, json: { tierId: tier.id } });
    expect(checkout.status, checkout.text).toBe(201);
    // Housekeeping has something to do: a rate-limit window that ended an hour ago.
    await admin`insert into public.rate_limits (key, window_start, window_end, hits)
                values ('scheduler-test|ended', now() - interval '2 hours', now() - interval '1 hour', 5)`;

    // Queued, and nothing sends them: the isolate runs no loop.
    const [queued] = await admin`
      select (select count(*)::int from mail_outbox where to_address = ${user.email} and status = 'pending') as mails,
             (select count(*)::int from public.webhook_deliveries where status = 'pending') as webhooks`;
    expect(queued).toEqual({ mails: 1, webhooks: 1 });
    expect(await admin`select count(*)::int as n from mail_outbox where status <> 'pending'`).toEqual([{ n: 0 }]);
    expect(smtp.received).toEqual([]);
    expect(hook.received).toEqual([]);

    // The drain job's target, as an operator stores it in Vault on Supabase.
    await admin`insert into vault.decrypted_secrets (name, decrypted_secret)
                values ('marketplace_drain_url', ${`${edge.baseUrl}/internal/drain`}), ('marketplace_drain_token', ${DRAIN_TOKEN})`;

    // pg_cron's next minute: the mails (both sign-ups') and the webhook arrive.
    const mails = await smtp.waitFor(2, 150_000);
    await hook.arrived(1);
    expect(mails.map((m) => m.to[0]).sort()).toEqual([user.email, promoter.email].sort());
    expect(mails.find((m) => m.to[0] === user.email)!.subject).toMatch(/confirm your .* email/i);
    expect(hook.accepted()).toEqual([expect.objectContaining({ type: 'subscription.created', data: expect.objectContaining({ agentId: agent.id, userId: user.userId }) })]);

    // It was the scheduled job: pg_cron ran it, it POSTed with the token from Vault, and the function answered 200
    // (the job's transaction commits once the function has answered, after the mail went out).
    await until(async () => (await admin`select 1 from cron.job_run_details where status in ('running', 'starting')`).length === 0
      && (await admin`select 1 from net.requests where status_code is not null`).length > 0);
    const [request] = await admin`select url, headers, body, status_code from net.requests order by id limit 1`;
    expect(request).toEqual({
      url: `${edge.baseUrl}/internal/drain`,
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${DRAIN_TOKEN}` },
      body: {},
      status_code: 200,
    });
    const runs = await admin`
      select j.jobname, d.status from cron.job_run_details d join cron.job j using (jobid) order by d.start_time`;
    expect(runs).toEqual(expect.arrayContaining([
      { jobname: 'marketplace-drain', status: 'succeeded' },
      { jobname: 'marketplace-housekeeping', status: 'succeeded' },
    ]));
    expect(await admin`select key from public.rate_limits where key = 'scheduler-test|ended'`).toHaveLength(0);
    const [after] = await admin`
      select (select status from mail_outbox where to_address = ${user.email}) as mail,
             (select status from public.webhook_deliveries limit 1) as webhook`;
    expect(after).toEqual({ mail: 'sent', webhook: 'delivered' });
    // The function's log says what the drain did; the token is in no log line.
    expect(output).toContain('background work drained');
    expect(output).not.toContain(DRAIN_TOKEN);
  }, 200_000);
});
