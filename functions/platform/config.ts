import { z } from 'zod';
import { parseIpRangeList, type IpRange } from './ip-ranges.ts';

/**
 * Runtime configuration, read once from the environment (contract.md section 3).
 * Runtime-neutral: callers pass the environment as a plain record (process.env on Node, Deno.env.toObject() on Deno).
 * A bad value stops the process with a message that names the variable.
 */

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

const optionalUrl = (what: string) =>
  optionalString.refine((v) => v === undefined || isHttpUrl(v), { message: `must be an http(s) URL (${what})` });

function isHttpUrl(value: string): boolean {
  try {
    const u = new URL(value);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/**
 * Whether postgres.js will read the connection string (its parseUrl: the first of several hosts, then `new URL`, then
 * the user name and password percent-decoded). What it cannot read it throws with the whole string in the error, the
 * password too, which the entries printed to their logs (review 116: a `#` in an unencoded password). Judged here, the
 * refusal names the variable and never its value.
 */
function parsesAsPostgresJsDoes(value: string): boolean {
  try {
    const authority = value.slice(value.indexOf('://') + 3).split(/[?/]/)[0]!;
    const hosts = decodeURIComponent(authority.slice(authority.indexOf('@') + 1));
    const url = new URL(value.replace(hosts, hosts.split(',')[0]!));
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
    return true;
  } catch {
    return false;
  }
}

const envSchema = z.object({
  PORT: z
    .string()
    .optional()
    .transform((v) => (v === undefined || v === '' ? 8000 : Number(v)))
    .refine((n) => Number.isInteger(n) && n >= 0 && n <= 65535, { message: 'must be an integer port from 0 to 65535' }),
  HOST: optionalString.refine((v) => v === undefined || /^[A-Za-z0-9.:[\]-]{1,255}$/.test(v), {
    message: 'must be a host name or IP address to listen on (0.0.0.0 or :: for every interface)',
  }),
  DATABASE_URL: optionalString.refine((v) => v === undefined || (/^postgres(ql)?:\/\//.test(v) && parsesAsPostgresJsDoes(v)), {
    message: 'must be a postgres:// or postgresql:// connection string (percent-encode any of : / ? # @ % in the user name or password)',
  }),
  DATABASE_POOL_SIZE: z
    .string()
    .optional()
    .transform((v) => (v === undefined || v === '' ? 10 : Number(v)))
    .refine((n) => Number.isInteger(n) && n >= 1 && n <= 200, { message: 'must be an integer from 1 to 200' }),
  PUBLIC_BASE_URL: optionalUrl('the service origin'),
  FRONTEND_URL: optionalUrl('the front-end origin'),
  AUTH_SECRET: optionalString.refine((v) => v === undefined || v.length >= 32, {
    message: 'must be at least 32 characters',
  }),
  ADMIN_EMAIL: optionalString.refine((v) => v === undefined || z.email().safeParse(v).success, {
    message: 'must be an email address',
  }),
  ADMIN_PASSWORD: optionalString.refine((v) => v === undefined || v.length >= 8, {
    message: 'must be at least 8 characters',
  }),
  STRIPE_SECRET_KEY: optionalString,
  STRIPE_WEBHOOK_SECRET: optionalString,
  STRIPE_API_URL: optionalUrl('a Stripe-compatible API'),
  SMTP_URL: optionalString.refine((v) => v === undefined || /^smtps?:\/\//.test(v), {
    message: 'must be an smtp:// or smtps:// URL',
  }),
  MAIL_FROM: optionalString,
  S3_ENDPOINT: optionalUrl('S3-compatible endpoint'),
  S3_BUCKET: optionalString,
  S3_REGION: optionalString,
  S3_ACCESS_KEY_ID: optionalString,
  S3_SECRET_ACCESS_KEY: optionalString,
  S3_PUBLIC_URL: optionalUrl('public base URL of the bucket'),
  NODE_ENV: z
    .string()
    .optional()
    .transform((v) => (v === undefined || v === '' ? 'development' : v))
    .pipe(z.enum(['development', 'production', 'test'])),
  AUTH_RATE_LIMIT_PER_MINUTE: z
    .string()
    .optional()
    .transform((v) => (v === undefined || v === '' ? 30 : Number(v)))
    .refine((n) => Number.isInteger(n) && n >= 0, { message: 'must be a non-negative integer (0 disables)' }),
  TRUSTED_PROXIES: optionalString.refine((v) => v === undefined || parseIpRangeList(v).invalid.length === 0, {
    message: 'must be a comma-separated list of IP addresses or CIDR ranges (e.g. 10.0.0.0/8, ::1)',
  }),
  AUTH_FAILED_SIGNINS_PER_ACCOUNT: z
    .string()
    .optional()
    .transform((v) => (v === undefined || v === '' ? 10 : Number(v)))
    .refine((n) => Number.isInteger(n) && n >= 0, { message: 'must be a non-negative integer (0 disables)' }),
  // Visible ASCII only: it travels as `Authorization: Bearer <DRAIN_TOKEN>` (a bearer token has no spaces, RFC 6750), so
  // a passphrase with a space started fine and every scheduler call was then refused 401, nothing ever drained (review 99).
  DRAIN_TOKEN: optionalString.refine((v) => v === undefined || /^[\x21-\x7e]{32,}$/.test(v), {
    message:
      'must be at least 32 visible ASCII characters with no space (a random secret shared with the scheduler that calls ' +
      'POST /internal/drain as a bearer token; e.g. openssl rand -hex 32)',
  }),
  GIT_SHA: optionalString,
  RELEASE_VERSION: optionalString,
  DATA_DIR: optionalString,
  PLATFORM_CURRENCY: optionalString.refine((v) => v === undefined || /^[A-Za-z]{3}$/.test(v), {
    message: 'must be an ISO 4217 currency code (e.g. usd)',
  }),
});

export interface Config {
  port: number;
  /**
   * The address the Node entry listens on (HOST): by default every interface in production (a container, behind a
   * load balancer) and only the loopback interface otherwise, so a development instance with its demo admin and demo
   * accounts is not reachable from the local network (found by a newcomer's check).
   */
  host: string;
  databaseUrl: string | undefined;
  /** Connections the service opens to DATABASE_URL at most (postgres.js pool). */
  databasePoolSize: number;
  publicBaseUrl: string;
  frontendUrl: string | undefined;
  authSecret: string;
  admin: { email: string; password: string } | undefined;
  stripe: { secretKey: string; webhookSecret: string | undefined; apiUrl: string | undefined } | undefined;
  smtp: { url: string; from: string } | undefined;
  mailFrom: string;
  s3:
    | { endpoint: string; bucket: string; region: string; accessKeyId: string; secretAccessKey: string; publicUrl: string | undefined }
    | undefined;
  env: 'development' | 'production' | 'test';
  isProduction: boolean;
  authRateLimitPerMinute: number;
  /**
   * Proxies whose X-Forwarded-For / X-Real-IP is believed (TRUSTED_PROXIES); empty: none, the socket peer is the
   * client. See http/rate-limit.ts `clientIp`.
   */
  trustedProxies: IpRange[];
  /** Failed sign-ins per account per 15 minutes before 429 (AUTH_FAILED_SIGNINS_PER_ACCOUNT); 0 disables. */
  authFailedSigninsPerAccount: number;
  /**
   * Bearer token of POST /internal/drain (DRAIN_TOKEN), the endpoint a scheduler calls to run the background work
   * (mail and webhook outboxes, housekeeping); undefined: the endpoint is off.
   */
  drainToken: string | undefined;
  gitSha: string;
  releaseVersion: string;
  /** Where the embedded database, generated secret and local uploads live (Node only). */
  dataDir: string;
  /**
   * The currency the admin's `monthlySpendCents` is counted in (PLATFORM_CURRENCY, lower case, default `usd`): tiers may
   * be priced in any ISO 4217 currency, and minor units of different currencies do not add up to one amount.
   */
  platformCurrency: string;
}

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.problems = problems;
    this.name = 'ConfigError';
  }
}

/** Parses the environment. `authSecret` must be present by now (outside production the Node entry generates one into DATA_DIR). */
export function loadConfig(env: Record<string, string | undefined>): Config {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  }
  const e = parsed.data;
  const problems: string[] = [];
  if (!e.AUTH_SECRET) {
    problems.push(
      e.NODE_ENV === 'production'
        ? 'AUTH_SECRET: is required in production, the same value on every instance (at least 32 characters)'
        : 'AUTH_SECRET: is required here (at least 32 characters)',
    );
  }
  if ((e.ADMIN_EMAIL === undefined) !== (e.ADMIN_PASSWORD === undefined)) {
    problems.push('ADMIN_EMAIL, ADMIN_PASSWORD: set both or neither');
  }
  const s3Keys = ['S3_ENDPOINT', 'S3_BUCKET', 'S3_ACCESS_KEY_ID', 'S3_SECRET_ACCESS_KEY'] as const;
  const s3Set = s3Keys.filter((k) => e[k] !== undefined);
  if (s3Set.length > 0 && s3Set.length < s3Keys.length) {
    problems.push(`${s3Keys.filter((k) => e[k] === undefined).join(', ')}: required when any S3_* variable is set`);
  }
  if (problems.length > 0) throw new ConfigError(problems);

  const publicBaseUrl = stripSlash(e.PUBLIC_BASE_URL ?? `http://127.0.0.1:${e.PORT}`);
  return {
    port: e.PORT,
    host: e.HOST ?? (e.NODE_ENV === 'production' ? '0.0.0.0' : '127.0.0.1'),
    databaseUrl: e.DATABASE_URL,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    publicBaseUrl,
    frontendUrl: e.FRONTEND_URL ? stripSlash(e.FRONTEND_URL) : undefined,
    authSecret: e.AUTH_SECRET!,
    admin: e.ADMIN_EMAIL && e.ADMIN_PASSWORD ? { email: e.ADMIN_EMAIL.toLowerCase(), password: e.ADMIN_PASSWORD } : undefined,
    stripe: e.STRIPE_SECRET_KEY
      ? { secretKey: e.STRIPE_SECRET_KEY, webhookSecret: e.STRIPE_WEBHOOK_SECRET, apiUrl: e.STRIPE_API_URL }
      : undefined,
    smtp: e.SMTP_URL ? { url: e.SMTP_URL, from: e.MAIL_FROM ?? 'Agent Marketplace <no-reply@localhost>' } : undefined,
    mailFrom: e.MAIL_FROM ?? 'Agent Marketplace <no-reply@localhost>',
    s3:
      e.S3_ENDPOINT && e.S3_BUCKET && e.S3_ACCESS_KEY_ID && e.S3_SECRET_ACCESS_KEY
        ? {
            endpoint: stripSlash(e.S3_ENDPOINT),
            bucket: e.S3_BUCKET,
            region: e.S3_REGION ?? 'us-east-1',
            accessKeyId: e.S3_ACCESS_KEY_ID,
            secretAccessKey: e.S3_SECRET_ACCESS_KEY,
            publicUrl: e.S3_PUBLIC_URL ? stripSlash(e.S3_PUBLIC_URL) : undefined,
          }
        : undefined,
    env: e.NODE_ENV,
    isProduction: e.NODE_ENV === 'production',
    authRateLimitPerMinute: e.AUTH_RATE_LIMIT_PER_MINUTE,
    trustedProxies: e.TRUSTED_PROXIES ? parseIpRangeList(e.TRUSTED_PROXIES).ranges : [],
    authFailedSigninsPerAccount: e.AUTH_FAILED_SIGNINS_PER_ACCOUNT,
    drainToken: e.DRAIN_TOKEN,
    gitSha: e.GIT_SHA ?? 'dev',
    releaseVersion: e.RELEASE_VERSION ?? 'dev',
    dataDir: e.DATA_DIR ?? '.data',
    platformCurrency: (e.PLATFORM_CURRENCY ?? 'usd').toLowerCase(),
  };
}

function stripSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

/**
 * Where people land from the links the service sends (mails, Stripe's return addresses, sign-in and consent): the front
 * end when there is one, else the service's own built-in pages.
 */
export function pagesOrigin(config: Pick<Config, 'frontendUrl' | 'publicBaseUrl'>): string {
  return config.frontendUrl ?? config.publicBaseUrl;
}

/** Where signed-out users are sent: the front end when there is one, else the built-in pages. */
export function signInUrls(config: Config): { signInUrl: string; signUpUrl: string } {
  const origin = pagesOrigin(config);
  return { signInUrl: `${origin}/sign-in`, signUpUrl: `${origin}/sign-up` };
}
