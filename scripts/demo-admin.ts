import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

/**
 * `npm start` with nothing set: outside production, when ADMIN_EMAIL/ADMIN_PASSWORD are unset, a demo admin
 * is created with a generated password kept in `<dataDir>/admin-credentials.json` (mode 600), so the same
 * account works across restarts. The caller prints the credentials the first time.
 */
export function withDemoAdmin(env: Record<string, string | undefined>): {
  env: Record<string, string | undefined>;
  generated: { email: string; password: string; file: string; created: boolean } | undefined;
} {
  const production = env.NODE_ENV === 'production';
  const set = (v: string | undefined) => v !== undefined && v.trim() !== '';
  if (production || set(env.ADMIN_EMAIL) || set(env.ADMIN_PASSWORD)) return { env, generated: undefined };
  const dataDir = env.DATA_DIR || '.data';
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'admin-credentials.json');
  let created = false;
  if (!existsSync(file)) {
    const credentials = { email: 'admin@example.com', password: randomBytes(12).toString('base64url') };
    writeFileSync(file, JSON.stringify(credentials, null, 2) + '\n', { mode: 0o600 });
    created = true;
  }
  const { email, password } = JSON.parse(readFileSync(file, 'utf8')) as { email: string; password: string };
  return { env: { ...env, ADMIN_EMAIL: email, ADMIN_PASSWORD: password }, generated: { email, password, file, created } };
}
