import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../functions/platform/config.ts';

/**
 * Configuration from the environment (contract.md section 3): defaults, and every bad value stopping start-up
 * with a message that names the variable, both through loadConfig and through the real `npm start` entry.
 */

const SECRET = 'a'.repeat(32);

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig({ AUTH_SECRET: SECRET, ...env });
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    const config = loadConfig({ AUTH_SECRET: SECRET });
    expect(config).toMatchObject({
      port: 8000,
      host: '127.0.0.1',
      databaseUrl: undefined,
      publicBaseUrl: 'http://127.0.0.1:8000',
      frontendUrl: undefined,
      admin: undefined,
      stripe: undefined,
      smtp: undefined,
      s3: undefined,
      env: 'development',
      isProduction: false,
      authRateLimitPerMinute: 30,
      gitSha: 'dev',
      releaseVersion: 'dev',
      dataDir: '.data',
      platformCurrency: 'usd',
    });
  });

  it('reads every variable', () => {
    const config = loadConfig({
      PORT: '9001',
      DATABASE_URL: 'postgresql://u:p@db:5432/app',
      PUBLIC_BASE_URL: 'https://api.example.com/',
      FRONTEND_URL: 'https://www.example.com',
      AUTH_SECRET: SECRET,
      ADMIN_EMAIL: 'Admin@Example.com',
      ADMIN_PASSWORD: 'long-enough',
      STRIPE_SECRET_KEY: 'sk_test_1',
      STRIPE_WEBHOOK_SECRET: 'whsec_1',
      STRIPE_API_URL: 'http://127.0.0.1:12111',
      SMTP_URL: 'smtp://mail:25',
      MAIL_FROM: 'Market <m@example.com>',
      S3_ENDPOINT: 'https://s3.example.com',
      S3_BUCKET: 'media',
      S3_REGION: 'eu-west-1',
      S3_ACCESS_KEY_ID: 'key',
      S3_SECRET_ACCESS_KEY: 'secret',
      S3_PUBLIC_URL: 'https://cdn.example.com',
      NODE_ENV: 'production',
      AUTH_RATE_LIMIT_PER_MINUTE: '0',
      DATABASE_POOL_SIZE: '32',
      GIT_SHA: 'abc',
      RELEASE_VERSION: '1.0.0',
      PLATFORM_CURRENCY: 'EUR',
    });
    expect(config).toMatchObject({
      port: 9001,
      host: '0.0.0.0',
      databaseUrl: 'postgresql://u:p@db:5432/app',
      databasePoolSize: 32,
      publicBaseUrl: 'https://api.example.com',
      frontendUrl: 'https://www.example.com',
      admin: { email: 'admin@example.com', password: 'long-enough' },
      stripe: { secretKey: 'sk_test_1', webhookSecret: 'whsec_1', apiUrl: 'http://127.0.0.1:12111' },
      smtp: { url: 'smtp://mail:25', from: 'Market <m@example.com>' },
      s3: { endpoint: 'https://s3.example.com', bucket: 'media', region: 'eu-west-1', publicUrl: 'https://cdn.example.com' },
      env: 'production',
      isProduction: true,
      authRateLimitPerMinute: 0,
      gitSha: 'abc',
      releaseVersion: '1.0.0',
      platformCurrency: 'eur',
    });
  });

  it('treats empty values as unset', () => {
    expect(loadConfig({ AUTH_SECRET: SECRET, PORT: '', DATABASE_URL: '', FRONTEND_URL: ' ' })).toMatchObject({
      port: 8000,
      databaseUrl: undefined,
      frontendUrl: undefined,
    });
  });

  it.each([
    ['PORT', { PORT: 'eighty' }],
    ['PORT', { PORT: '70000' }],
    ['PORT', { PORT: '80.5' }],
    ['HOST', { HOST: 'example.com; rm -rf /' }],
    ['HOST', { HOST: '10.0.0.1 10.0.0.2' }],
    ['DATABASE_URL', { DATABASE_URL: 'mysql://localhost/app' }],
    ['PUBLIC_BASE_URL', { PUBLIC_BASE_URL: 'ftp://example.com' }],
    ['FRONTEND_URL', { FRONTEND_URL: 'not a url' }],
    ['AUTH_SECRET', { AUTH_SECRET: 'too-short' }],
    ['ADMIN_EMAIL', { ADMIN_EMAIL: 'nobody', ADMIN_PASSWORD: 'long-enough' }],
    ['ADMIN_PASSWORD', { ADMIN_EMAIL: 'a@example.com', ADMIN_PASSWORD: 'short' }],
    ['ADMIN_PASSWORD', { ADMIN_EMAIL: 'a@example.com' }],
    ['STRIPE_API_URL', { STRIPE_API_URL: 'localhost:12111' }],
    ['SMTP_URL', { SMTP_URL: 'http://mail' }],
    ['S3_ENDPOINT', { S3_ENDPOINT: 's3.example.com', S3_BUCKET: 'b', S3_ACCESS_KEY_ID: 'k', S3_SECRET_ACCESS_KEY: 's' }],
    ['S3_SECRET_ACCESS_KEY', { S3_ENDPOINT: 'https://s3.example.com', S3_BUCKET: 'b', S3_ACCESS_KEY_ID: 'k' }],
    ['S3_PUBLIC_URL', { S3_PUBLIC_URL: 'cdn' }],
    ['NODE_ENV', { NODE_ENV: 'staging' }],
    ['PLATFORM_CURRENCY', { PLATFORM_CURRENCY: 'dollars' }],
    ['AUTH_RATE_LIMIT_PER_MINUTE', { AUTH_RATE_LIMIT_PER_MINUTE: '-1' }],
    ['AUTH_RATE_LIMIT_PER_MINUTE', { AUTH_RATE_LIMIT_PER_MINUTE: 'lots' }],
    ['DATABASE_POOL_SIZE', { DATABASE_POOL_SIZE: '0' }],
    ['DATABASE_POOL_SIZE', { DATABASE_POOL_SIZE: '2.5' }],
  ])('refuses a bad %s with a message naming it', (variable, env) => {
    const problems = problemsOf(env);
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.join('\n')).toContain(variable);
  });

  it("refuses a DATABASE_URL the driver cannot read without ever printing it, password and all (review 116)", () => {
    // The driver threw `Invalid URL: '<the string>'`, and both entries printed that error: the password in the logs.
    for (const url of ['postgres://app:Sup3rS3cretDbPw#x@127.0.0.1:5432/marketplace', 'postgres://app:Sup3rS3cret%zz@db:5432/app']) {
      const problems = problemsOf({ DATABASE_URL: url }).join('\n');
      expect(problems).toContain('DATABASE_URL: must be a postgres:// or postgresql:// connection string');
      expect(problems).not.toContain('Sup3rS3cret');
    }
    // What the driver reads stays accepted: an encoded password, several hosts, query parameters.
    for (const url of ['postgres://app:p%23ss%40word@db:5432/app', 'postgresql://u:p@h1:5432,h2:5433/app?sslmode=require']) {
      expect(problemsOf({ DATABASE_URL: url })).toEqual([]);
    }
  });

  it('listens on the loopback interface outside production and on every interface in production, unless HOST says', () => {
    expect(loadConfig({ AUTH_SECRET: SECRET }).host).toBe('127.0.0.1');
    expect(loadConfig({ AUTH_SECRET: SECRET, NODE_ENV: 'production' }).host).toBe('0.0.0.0');
    expect(loadConfig({ AUTH_SECRET: SECRET, HOST: '0.0.0.0' }).host).toBe('0.0.0.0');
    expect(loadConfig({ AUTH_SECRET: SECRET, NODE_ENV: 'production', HOST: '10.1.2.3' }).host).toBe('10.1.2.3');
    expect(loadConfig({ AUTH_SECRET: SECRET, HOST: '::1' }).host).toBe('::1');
  });

  it('reports every bad variable at once', () => {
    const problems = problemsOf({ PORT: 'x', NODE_ENV: 'staging', SMTP_URL: 'nope' });
    for (const v of ['PORT', 'NODE_ENV', 'SMTP_URL']) expect(problems.join('\n')).toContain(v);
  });

  it('refuses a DRAIN_TOKEN no scheduler could present as a bearer token (a space, a tab, a non-ASCII letter)', () => {
    // (review 99: a passphrase started fine, and every POST /internal/drain presenting it was refused 401)
    for (const token of ['correct horse battery staple scheduler 2026', `${'a'.repeat(32)}\tb`, `${'a'.repeat(32)}é`]) {
      expect(problemsOf({ DRAIN_TOKEN: token }).join('\n')).toContain('DRAIN_TOKEN: must be at least 32 visible ASCII characters');
    }
    expect(problemsOf({ DRAIN_TOKEN: 'x'.repeat(31) }).join('\n')).toContain('DRAIN_TOKEN');
    expect(problemsOf({ DRAIN_TOKEN: `${'a'.repeat(31)}!~` })).toEqual([]);
  });

  it('never echoes a secret value in its message', () => {
    expect(problemsOf({ AUTH_SECRET: 'hunter2-secret' }).join('\n')).not.toContain('hunter2');
  });
});

describe('npm start with a bad variable', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-config-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  function start(command: string, args: string[], env: Record<string, string>): Promise<{ code: number | null; output: string }> {
    return new Promise((resolve) => {
      const child = spawn(command, args, {
        env: { ...process.env, DATABASE_URL: '', DATA_DIR: dataDir, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (d) => (output += d));
      child.stderr.on('data', (d) => (output += d));
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve({ code, output });
      });
    });
  }

  it('scripts/serve.ts exits non-zero before listening, naming the variable', async () => {
    const { code, output } = await start('node_modules/.bin/tsx', ['scripts/serve.ts'], { PORT: 'eighty', NODE_ENV: 'staging' });
    expect(code).not.toBe(0);
    expect(output).toContain('Invalid configuration');
    expect(output).toContain('PORT');
    expect(output).toContain('NODE_ENV');
    expect(output).not.toContain('listening');
  });

  it('in production without AUTH_SECRET: refuses to start and generates none (every instance must share one)', async () => {
    const ownDir = mkdtempSync(join(tmpdir(), 'mkt-config-prod-'));
    try {
      const { code, output } = await start('npm', ['start', '--silent'], { NODE_ENV: 'production', AUTH_SECRET: '', DATA_DIR: ownDir });
      expect(code).not.toBe(0);
      expect(output).toContain('AUTH_SECRET: is required in production');
      expect(output).not.toContain('listening');
      expect(existsSync(join(ownDir, 'auth-secret'))).toBe(false);
    } finally {
      rmSync(ownDir, { recursive: true, force: true });
    }
  });

  it('npm start does the same', async () => {
    const { code, output } = await start('npm', ['start', '--silent'], { DATABASE_URL: 'mysql://nope' });
    expect(code).not.toBe(0);
    expect(output).toContain('DATABASE_URL');
    expect(output).not.toContain('listening');
  });
});
