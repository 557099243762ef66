import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import Stripe from 'stripe';
import { startPostgres } from '../postgres-server.ts';
import { startStripeFake, type FakeEvent } from '../../tests/stripe-fake/server.ts';
import { cookieHeader, createDatabase, percentile, startService, stopService, type Service } from './lib.ts';

/**
 * `npx tsx scripts/bench/webhook.ts [events] [concurrency] [subscriptions]`: how fast the service processes
 * signed `customer.subscription.updated` events (verify the signature, check the event id, re-read the
 * subscription from Stripe, write its state in one SQL function call).
 *
 * The service runs as a child process (scripts/serve.ts, production mode) on a throwaway PostgreSQL 15 server
 * (durable: fsync and synchronous commit on). Stripe is the tests' fake (tests/stripe-fake), in this process:
 * every event costs one real HTTP round trip to it, as it would to Stripe (minus Stripe's own latency, which
 * in production dominates). Events are made and signed before the clock starts; the measured part is only
 * their delivery, `concurrency` at a time, over `subscriptions` subscriptions (so some events of the same
 * subscription contend). Figures depend on the machine and are printed, never asserted.
 */

const totalEvents = Number(process.argv[2] ?? 2000);
const concurrency = Number(process.argv[3] ?? 16);
const subscriptionCount = Number(process.argv[4] ?? 50);

const ADMIN = { email: 'bench-admin@example.test', password: 'bench-admin-password' };

async function main() {
  const fake = await startStripeFake();
  const server = await startPostgres({ durable: true });
  const dataDir = mkdtempSync(join(tmpdir(), 'mkt-bench-'));
  let service: Service | undefined;
  try {
    const dbUrl = await createDatabase(server.url, 'bench');
    service = await startService(
      (url) => ({
        PUBLIC_BASE_URL: url,
        ADMIN_EMAIL: ADMIN.email,
        ADMIN_PASSWORD: ADMIN.password,
        DATABASE_URL: dbUrl,
        DATA_DIR: dataDir,
        ...fake.env(),
      }),
      90_000,
    );
    const db = postgres(dbUrl, { max: 2, onnotice: () => {} });
    const webhookUrl = `${service.url}/webhooks/stripe`;

    // ---- setup: an agent, a paid tier (through the API, so it has a Stripe price), subscribed users
    const signIn = await fetch(`${service.url}/api/auth/sign-in/email`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(ADMIN),
    });
    const cookie = cookieHeader(signIn);
    const [agent] = await db`insert into agents (slug, name, status) values ('bench-agent', 'Bench agent', 'active') returning id`;
    const tierRes = await fetch(`${service.url}/agents/${agent!.id}/pricing`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie },
      body: JSON.stringify({ name: 'Pro', priceCents: 2000, currency: 'usd', interval: 'month', isPublic: true, features: [] }),
    });
    if (tierRes.status !== 201) throw new Error(`createTier: ${tierRes.status} ${await tierRes.text()}`);
    const [tier] = await db`select stripe_price_id from tiers where name = 'Pro'`;

    const url = new URL(fake.url);
    const stripe = new Stripe(fake.secretKey, { host: url.hostname, port: url.port, protocol: 'http' });
    const subscriptionIds: string[] = [];
    for (let i = 0; i < subscriptionCount; i++) {
      const userId = `bench-user-${i}`;
      await db`insert into "user" (id, name, email, "emailVerified", role) values (${userId}, ${userId}, ${userId + '@example.test'}, true, 'user')`;
      const customer = await stripe.customers.create({ email: `${userId}@example.test`, metadata: { userId } });
      const session = await stripe.checkout.sessions.create({
        mode: 'subscription',
        customer: customer.id,
        client_reference_id: userId,
        line_items: [{ price: tier!.stripe_price_id, quantity: 1 }],
        subscription_data: { metadata: { userId, tierId: '', agentId: agent!.id } },
        success_url: `${service.url}/ok`,
      });
      subscriptionIds.push(fake.completeCheckout(session.id).id);
    }
    for (const event of fake.takeEvents()) {
      const res = await fake.deliver(webhookUrl, event);
      if (res.status !== 200) throw new Error(`setup delivery: ${res.status} ${await res.text()}`);
    }
    const placed = await db`select count(*)::int as n from subscriptions where stripe_subscription_id is not null`;
    if (placed[0]!.n !== subscriptionCount) throw new Error(`only ${placed[0]!.n} subscriptions placed`);

    // ---- the events: each is a real change at Stripe (cancel at period end toggled), signed in advance
    for (let i = 0; i < totalEvents; i++) {
      const id = subscriptionIds[i % subscriptionIds.length]!;
      await stripe.subscriptions.update(id, { cancel_at_period_end: Math.floor(i / subscriptionIds.length) % 2 === 0 });
    }
    const events = fake.takeEvents().filter((e: FakeEvent) => e.type === 'customer.subscription.updated');
    const signed = await Promise.all(events.map((e) => fake.sign(e)));

    // Warm-up: a few deliveries of fresh-looking copies so JIT, pools and plans are settled.
    for (let i = 0; i < Math.min(50, signed.length); i++) {
      const copy = { ...events[i]!, id: `evt_warmup_${i}` };
      const s = await fake.sign(copy);
      await fetch(webhookUrl, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': s.header }, body: s.payload });
    }

    // ---- measured: deliver every event once, `concurrency` in flight
    const latencies: number[] = [];
    let failures = 0;
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        for (;;) {
          const i = next++;
          if (i >= signed.length) return;
          const s = signed[i]!;
          const t0 = performance.now();
          const res = await fetch(webhookUrl, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'stripe-signature': s.header },
            body: s.payload,
          });
          await res.arrayBuffer();
          latencies.push(performance.now() - t0);
          if (res.status !== 200) failures++;
        }
      }),
    );
    const elapsed = (performance.now() - started) / 1000;
    latencies.sort((a, b) => a - b);
    const recorded = await db`select count(*)::int as n from stripe_events where type = 'customer.subscription.updated' and id not like 'evt_warmup_%'`;
    await db.end();

    console.log(
      `\nsigned customer.subscription.updated events, ${concurrency} in flight, ${subscriptionCount} subscriptions, ` +
        `service on PostgreSQL 15 (durable), Stripe = local fake:\n`,
    );
    console.table([
      {
        events: signed.length,
        'events/s': Math.round(signed.length / elapsed),
        'p50 ms': Number(percentile(latencies, 50).toFixed(1)),
        'p99 ms': Number(percentile(latencies, 99).toFixed(1)),
        'max ms': Number(latencies[latencies.length - 1]!.toFixed(1)),
        failures,
        'recorded once': recorded[0]!.n,
      },
    ]);
  } finally {
    if (service) await stopService(service);
    server.stop();
    await fake.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
