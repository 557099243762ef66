import { spawn, type ChildProcess } from 'node:child_process';
import { connect, createServer, type Server } from 'node:net';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { edgeConfigFile, expectedEdgeConfig, expectedVendoredFiles, vendoredFilesOnDisk } from '../../scripts/edge-imports.ts';
import { freePort } from '../../scripts/postgres-server.ts';
import { root } from '../../scripts/supabase-cli.ts';
import { TEST_SECRET } from '../support/app.ts';
import { createTestDatabase, holdOpen, type TestDatabase } from '../support/databases.ts';
import { HttpClient } from '../support/http.ts';

/**
 * The Supabase Edge entry (supabase/functions/api/index.ts) type-checks and serves under Deno with only its
 * deno.json import map (no package.json, no node_modules), against a real PostgreSQL. pg-only: on the edge the
 * database is a server reached over the network; PGlite runs inside the Node test process.
 * This is the guard for runtime neutrality: a static import of something Node-only anywhere under
 * createApp/buildDeps fails here.
 */

const entry = join(root, 'supabase', 'functions', 'api', 'index.ts');
const deno = join(root, 'node_modules', '.bin', 'deno');
const denoEnv = {
  ...process.env,
  // Resolve exactly as the Supabase bundler does: through deno.json only.
  DENO_NO_PACKAGE_JSON: '1',
  DENO_NO_UPDATE_CHECK: '1',
  // Downloaded npm packages are kept between runs (a cold cache downloads them from the registry once).
  DENO_DIR: process.env.DENO_DIR ?? join(root, 'node_modules', '.cache', 'deno'),
  NO_COLOR: '1',
};

function run(args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(deno, args, { cwd: root, env: denoEnv, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.on('exit', (code) => resolve({ code, output }));
  });
}

describe('edge import map', () => {
  it('maps every runtime dependency of package.json to npm:<name>@<exact version> (npm run gen:edge-imports)', () => {
    expect(readFileSync(edgeConfigFile, 'utf8'), 'supabase/functions/api/deno.json is stale: run `npm run gen:edge-imports`').toBe(
      expectedEdgeConfig(),
    );
  });

  it('loads the postgres.js driver from its patched copy beside the function (npm run gen:edge-imports), not unpatched from the registry', () => {
    const onDisk = vendoredFilesOnDisk();
    expect([...onDisk.keys()], 'supabase/functions/api/vendor is stale: run `npm run gen:edge-imports`').toEqual([...expectedVendoredFiles().keys()]);
    for (const [path, text] of expectedVendoredFiles()) expect(onDisk.get(path) === text, `${path} is stale: run \`npm run gen:edge-imports\``).toBe(true);
    // The copy is the patched driver (patches/postgres+3.4.9.patch, applied by npm install).
    expect(onDisk.get('vendor/postgres/src/connection.js')).toContain('Patched (porsager/postgres#1154, #1208)');
  });
});

describe('deno check', () => {
  it('type-checks the edge entry and everything it imports', async () => {
    const { code, output } = await run(['check', '--quiet', '--config', edgeConfigFile, entry]);
    expect(output.replace(/^Download .*\n/gm, ''), 'deno check failed').toBe('');
    expect(code).toBe(0);
  }, 300_000);
});

describe('starting in production', () => {
  it('refuses to start without FRONTEND_URL, saying why: Supabase serves HTML from a function as text/plain, so the built-in pages cannot be shown there', async () => {
    const started = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn(deno, ['run', '--allow-net', '--allow-env', '--allow-read', '--allow-sys', '--config', edgeConfigFile, entry], {
        cwd: root,
        env: {
          ...denoEnv,
          SUPABASE_DB_URL: 'postgres://nobody@127.0.0.1:1/none',
          AUTH_SECRET: TEST_SECRET,
          PUBLIC_BASE_URL: 'https://example.supabase.co/functions/v1/api',
          NODE_ENV: 'production',
          FRONTEND_URL: '',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (d) => (output += d));
      child.stderr.on('data', (d) => (output += d));
      child.on('exit', (code) => resolve({ code, output }));
    });
    expect(started.code).not.toBe(0);
    expect(started.output).toContain('FRONTEND_URL: is required on the edge in production');
  }, 300_000);
});

describe('serving under Deno', () => {
  let database: TestDatabase;
  let child: ChildProcess | undefined;
  let http: HttpClient;
  let output = '';

  beforeAll(async () => {
    database = await createTestDatabase();
    const port = await freePort();
    child = spawn(deno, ['run', '--allow-net', '--allow-env', '--allow-read', '--allow-sys', '--config', edgeConfigFile, entry], {
      cwd: root,
      env: {
        ...denoEnv,
        // Supabase provides SUPABASE_DB_URL; DATABASE_URL must not be needed.
        DATABASE_URL: '',
        SUPABASE_DB_URL: database.url!,
        AUTH_SECRET: TEST_SECRET,
        PORT: String(port),
        PUBLIC_BASE_URL: `http://127.0.0.1:${port}/api`,
        NODE_ENV: 'test',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    http = new HttpClient(`http://127.0.0.1:${port}`);
    const deadline = Date.now() + 240_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`the edge entry exited (${child.exitCode}):\n${output}`);
      const up = await http.get('/api/health').catch(() => undefined);
      if (up?.status === 200) break;
      if (Date.now() > deadline) throw new Error(`the edge entry did not answer /api/health:\n${output}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }, 300_000);

  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child!.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    await database?.drop();
  });

  /** The first JSON log line of the edge process that matches, as soon as it has been written. */
  function logLine(match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
    const find = () =>
      output
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => {
          try {
            return JSON.parse(l) as Record<string, unknown>;
          } catch {
            return undefined; // a line still being written
          }
        })
        .find((l) => l !== undefined && match(l));
    return new Promise((resolve, reject) => {
      const stop = () => {
        child!.stdout!.off('data', check);
        child!.stderr!.off('data', check);
        child!.off('exit', exited);
      };
      const check = () => {
        const found = find();
        if (found) {
          stop();
          resolve(found);
        }
      };
      const exited = () => {
        stop();
        reject(new Error(`the edge process exited before logging the line:\n${output}`));
      };
      child!.stdout!.on('data', check);
      child!.stderr!.on('data', check);
      child!.once('exit', exited);
      check();
    });
  }

  it('GET /health answers the health record (the function name prefix is stripped)', async () => {
    const res = await http.get('/api/health');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'success', error: null, data: { status: 'ok', gitSha: 'dev', releaseVersion: 'dev' } });
    expect(res.headers.get('x-request-id')).toEqual(expect.any(String));
  });

  it('GET /ready reaches the database', async () => {
    const res = await http.get('/api/ready');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ ready: true });
  });

  it('serves the whole application: the OpenAPI document lists the operations', async () => {
    const res = await http.get('/api/openapi.json');
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe('3.1.0');
    expect(res.body.servers).toEqual([{ url: expect.stringMatching(/\/api$/) }]);
    const operationIds = Object.values(res.body.paths as Record<string, Record<string, { operationId?: string }>>).flatMap((ops) =>
      Object.values(ops).map((o) => o.operationId),
    );
    expect(operationIds).toEqual(expect.arrayContaining(['getHealth', 'getReady']));
  });

  it("serves the auth library's routes under the public path too: sign-up, sign-in, the session, OpenID discovery and the JWKS (review 58)", async () => {
    // The library routed by its base URL's path (/api here, /functions/v1/api on Supabase) after the entry had
    // removed it: every /api/auth/* route answered an empty 404 on the edge.
    const origin = http.baseUrl;
    const email = `edge-${crypto.randomUUID()}@example.test`;
    const password = 'a long enough password';
    const signUp = await http.post('/api/api/auth/sign-up/email', { headers: { origin }, json: { email, password, name: 'Edge User' } });
    expect([signUp.status, signUp.body?.user?.email]).toEqual([200, email]);
    const signIn = await http.post('/api/api/auth/sign-in/email', { headers: { origin }, json: { email, password } });
    expect(signIn.status, signIn.text).toBe(200);
    const cookie = signIn.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    expect((await http.get('/api/api/auth/get-session', { cookie })).body.user.email).toBe(email);
    expect((await http.get('/api/me', { cookie })).body.data.email).toBe(email);

    const discovery = await http.get('/api/api/auth/.well-known/openid-configuration');
    expect(discovery.status).toBe(200);
    // Its URLs are the public ones, where they answer.
    expect(discovery.body).toMatchObject({ issuer: `${origin}/api/api/auth`, jwks_uri: `${origin}/api/api/auth/jwks`, token_endpoint: `${origin}/api/api/auth/oauth2/token` });
    const jwks = await http.get('/api/api/auth/jwks');
    expect([jwks.status, jwks.body.keys.length > 0]).toEqual([200, true]);
  });

  it('a database that ends its connections under a request in flight: 503, the isolate stays up, the next requests are served (three rounds; review 58)', async () => {
    // As tests/foundation/db-outage.pg-only.test.ts holds the Node entry to. The edge ran the driver unpatched: the
    // isolate died with "Cannot read properties of null (reading 'write')" at connection.js:255.
    const admin = postgres(database.url!, { max: 1, onnotice: () => {} });
    const appBackends = () => admin<{ pid: number }[]>`select pid from pg_stat_activity
      where datname = current_database() and application_name = 'agent-marketplace'`;
    try {
      for (let round = 1; round <= 3; round++) {
        const warm = await Promise.all(Array.from({ length: 4 }, () => http.get('/api/agents')));
        expect(warm.map((r) => r.status), `round ${round}: warm-up`).toEqual([200, 200, 200, 200]);
        const locker = postgres(database.url!, { max: 1, onnotice: () => {} });
        const lock = await holdOpen(locker, (tx) => tx.unsafe('lock table public.agents in access exclusive mode'));
        let inFlight: ReturnType<typeof http.get> | undefined;
        try {
          inFlight = http.get('/api/agents');
          // the request waits on the lock; then the server ends every backend of the edge's pool
          while ((await admin`select 1 from pg_stat_activity where datname = current_database()
                                and application_name = 'agent-marketplace' and wait_event_type = 'Lock'`).length === 0) {
            await new Promise((r) => setTimeout(r, 10));
          }
          const ended = await appBackends();
          await admin`select pg_terminate_backend(pid) from unnest(${ended.map((b) => b.pid)}::int[]) as pid`;
          const cut = await inFlight;
          expect([cut.status, (cut.body as { error?: { code?: string } } | undefined)?.error?.code], `round ${round}\n${output.slice(-2000)}`).toEqual([503, 'UNAVAILABLE']);
        } finally {
          await lock.release();
          await locker.end();
          await inFlight?.catch(() => undefined);
        }
        // Up, and serving on fresh connections: a few 503s at most while the pool finds out, then 200s.
        const next: number[] = [];
        for (let i = 0; i < 10 && next.slice(-3).join() !== '200,200,200'; i++) {
          next.push((await http.get('/api/agents').catch(() => ({ status: -1 }))).status);
        }
        expect(next.slice(-3), `round ${round}: ${next.join(' ')}\n${output.slice(-2000)}`).toEqual([200, 200, 200]);
        expect(next.filter((status) => status !== 200 && status !== 503), `round ${round}: ${next.join(' ')}`).toEqual([]);
        expect(child!.exitCode).toBeNull();
      }
    } finally {
      await admin.end();
    }
  }, 120_000);

  it("a 401's details.authorizationServer answers the OAuth metadata on the edge, as on Node (review 89: an empty 404)", async () => {
    const refused = await http.get('/api/me');
    expect(refused.status).toBe(401);
    const advertised = new URL(refused.body.error.details.authorizationServer as string);
    expect(advertised.pathname).toBe('/api/.well-known/oauth-authorization-server/api/auth');
    const metadata = await http.get(advertised.pathname);
    expect([metadata.status, metadata.body?.issuer, metadata.body?.token_endpoint]).toEqual([
      200,
      `${http.baseUrl}/api/api/auth`,
      `${http.baseUrl}/api/api/auth/oauth2/token`,
    ]);
  });

  it('answers unknown routes with the 404 envelope, and logs one JSON line per request', async () => {
    const res = await http.get('/api/no/such/route', { headers: { 'x-request-id': 'edge-404' } });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('NOT_FOUND');
    // The line may reach us after the response: wait for it to arrive (no fixed delay).
    const line = await logLine((l) => l.requestId === 'edge-404');
    expect(line).toMatchObject({ msg: 'request', method: 'GET', status: 404, path: '/no/such/route' });
  });
});

describe('a new isolate while its database is unreachable (review 89)', () => {
  let database: TestDatabase;
  let child: ChildProcess | undefined;
  let relay: Server | undefined;
  let output = '';

  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child!.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    await new Promise((r) => (relay ? relay.close(r) : r(undefined)));
    await database?.drop();
  });

  it('serves from its first moment: /health 200, every other path 503 UNAVAILABLE with Retry-After, and the whole API once the database answers', async () => {
    // The entry awaited its start-up work (the signing key, the admin account) before Deno.serve: a database that did
    // not answer killed the isolate at boot, and every request to it went unanswered. The database is reached through
    // a relay that refuses connections at first (nothing listens on its port) and later forwards them.
    database = await createTestDatabase();
    const target = new URL(database.url!);
    const relayPort = await freePort();
    const via = new URL(database.url!);
    via.port = String(relayPort);
    const port = await freePort();
    child = spawn(deno, ['run', '--allow-net', '--allow-env', '--allow-read', '--allow-sys', '--config', edgeConfigFile, entry], {
      cwd: root,
      env: { ...denoEnv, DATABASE_URL: '', SUPABASE_DB_URL: via.href, AUTH_SECRET: TEST_SECRET, PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}/api`, NODE_ENV: 'test' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    const http = new HttpClient(`http://127.0.0.1:${port}`);
    const deadline = Date.now() + 240_000;
    let health: Awaited<ReturnType<typeof http.get>> | undefined;
    while (!health && child.exitCode === null && Date.now() < deadline) {
      health = await http.get('/api/health').catch(() => undefined);
      if (!health) await new Promise((r) => setTimeout(r, 250));
    }
    expect(health?.status, `the edge process ${child.exitCode === null ? 'is up' : `exited (${child.exitCode})`}:\n${output.slice(-1500)}`).toBe(200);
    expect((health!.body as { data: { status: string } }).data.status).toBe('ok');

    const refused = await http.get('/api/agents');
    expect([refused.status, refused.body?.error?.code, refused.headers.get('retry-after')]).toEqual([503, 'UNAVAILABLE', '1']);
    expect((await http.get('/api/ready')).status).toBe(503);
    expect(child.exitCode).toBeNull();

    relay = createServer((socket) => {
      const upstream = connect(Number(target.port), target.hostname);
      socket.pipe(upstream).pipe(socket);
      socket.on('error', () => upstream.destroy());
      upstream.on('error', () => socket.destroy());
    });
    await new Promise<void>((r) => relay!.listen(relayPort, '127.0.0.1', r));
    const statuses: number[] = [];
    for (let i = 0; i < 40 && statuses.at(-1) !== 200; i++) {
      statuses.push((await http.get('/api/agents')).status);
      if (statuses.at(-1) !== 200) await new Promise((r) => setTimeout(r, 250));
    }
    expect(statuses.at(-1), `${statuses.join(' ')}\n${output.slice(-1500)}`).toBe(200);
    expect(statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
    expect((await http.get('/api/ready')).body.data).toEqual({ ready: true });
  }, 300_000);
});
