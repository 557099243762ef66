import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { first, sql } from '../../functions/platform/db.ts';
import { startTestApp, type TestApp } from '../support/app.ts';

/**
 * The per-address limits are the bound on anonymous writes (sign-ups, waitlist joins, password-reset mails, anonymous
 * checkouts, failed sign-ins per address). A single IPv6 subscriber, VM or container host is handed at least a /64
 * (2^64 addresses): counted by the whole 128 bits, one client rotating its source address inside its own /64 was a
 * new client to every limit (found by a review). The limits count an IPv6 client by its /64 (`rateLimitSubject`).
 */

let t: TestApp;
beforeAll(async () => {
  // A trusted proxy in front (the Supabase gateway, a CDN, a balancer): X-Forwarded-For carries the client's address.
  t = await startTestApp({ env: { AUTH_RATE_LIMIT_PER_MINUTE: '3', TRUSTED_PROXIES: '127.0.0.0/8, ::1', AUTH_FAILED_SIGNINS_PER_ACCOUNT: '0' } });
});
afterAll(() => t.close());

const signUpFrom = (ip: string) =>
  t.http.post('/api/auth/sign-up/email', {
    json: { email: `v6-${randomUUID().slice(0, 12)}@example.test`, password: `pw-${randomUUID()}`, name: 'Rotating' },
    headers: { 'x-forwarded-for': ip },
  });

describe('attack: one IPv6 client rotating its address inside its own /64', () => {
  it('gets no more anonymous sign-ups than one address does (AUTH_RATE_LIMIT_PER_MINUTE=3)', async () => {
    const users = async () => Number((await first<{ n: number }>(t.db, sql`select count(*)::int as n from "user"`))!.n);
    const mails = async () => Number((await first<{ n: number }>(t.db, sql`select count(*)::int as n from public.mail_outbox`))!.n);
    const usersBefore = await users();
    const mailsBefore = await mails();

    const statuses: number[] = [];
    // 2001:db8:1:2::/64 is one subscriber's prefix; the interface identifier is the client's to choose.
    for (let i = 1; i <= 12; i++) statuses.push((await signUpFrom(`2001:db8:1:2::${i.toString(16)}`)).status);

    // What one IPv4 address gets: 3 sign-ups a minute, then 429.
    expect(statuses.filter((s) => s === 200).length, `answers: ${statuses.join(',')}`).toBeLessThanOrEqual(3);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(9);
    expect((await users()) - usersBefore).toBeLessThanOrEqual(3);
    expect((await mails()) - mailsBefore).toBeLessThanOrEqual(3);

    // Another subscriber's /64 is another client.
    expect((await signUpFrom('2001:db8:1:3::1')).status).toBe(200);
  });
});
