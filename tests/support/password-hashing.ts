import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import type { PasswordHashing } from '../../functions/auth/index.ts';

/**
 * The tests' password hashing (functions/deps.ts `BuildOptions.passwordHashing`): scrypt as the library does it, at a
 * cost 64 times lower (N=1024, r=4: 512 KiB, well under a millisecond), so the thousands of accounts a run signs up
 * and in cost the suite seconds instead of minutes. Stored as `test:<salt>:<key>`, a form the library's own check
 * refuses, so a hash made here never passes for a real one. Apps built without it hash as in production
 * (tests/identity/password-hashing.test.ts).
 */
const N = 1024;
const r = 4;

function derive(password: string, salt: string): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFKC'), salt, 64, { N, r, p: 1 }, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

export const testPasswordHashing: PasswordHashing = {
  hash: async (password) => {
    const salt = randomBytes(16).toString('hex');
    return `test:${salt}:${(await derive(password, salt)).toString('hex')}`;
  },
  verify: async ({ hash, password }) => {
    const [kind, salt, key] = hash.split(':');
    if (kind !== 'test' || !salt || !key) return false;
    return timingSafeEqual(await derive(password, salt), Buffer.from(key, 'hex'));
  },
};
