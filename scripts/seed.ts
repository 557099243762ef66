import { pathToFileURL } from 'node:url';
import type { AppDeps } from '../functions/platform/app-types.ts';
import { addChangelogEntry } from '../functions/catalog/changelog.ts';
import { createAgent } from '../functions/catalog/create-agent.ts';
import { upsertReview } from '../functions/catalog/reviews.ts';
import { insertTier } from '../functions/catalog/tiers.ts';
import { joinWaitlist } from '../functions/catalog/waitlist.ts';
import { startFreeSubscription } from '../functions/billing/subscriptions.ts';
import { meterUsage } from '../functions/metering/usage.ts';
import { first, inTurn, rows, sql } from '../functions/platform/db.ts';

/**
 * The demo catalog `npm start` shows on a fresh database in development: a few agents with tags,
 * capabilities, how-it-works steps, changelog, free and paid tiers (one hidden), metric definitions with tier
 * quotas, reviews by demo users, a waitlist entry, and eight weeks of demo subscriptions and usage. It goes through the same services as the API (agents
 * get real OAuth clients), runs only when there are no agents yet, and never in production.
 *
 * Standalone: `npx tsx scripts/seed.ts` seeds the configured database (DATABASE_URL or .data/pglite).
 */

interface DemoTier {
  name: string;
  priceCents: number;
  interval?: 'month' | 'year';
  isPublic?: boolean;
  features: string[];
  /** metric slug -> quota (null = unlimited) */
  quotas: Record<string, number | null>;
}

interface DemoAgent {
  slug: string;
  name: string;
  description: string;
  longDescription: string;
  status: 'active' | 'coming_soon' | 'draft';
  tags: string[];
  capabilities: Array<{ title: string; description: string }>;
  steps: Array<{ title: string; description: string }>;
  changelog: Array<{ version: string; title: string; body: string; daysAgo: number }>;
  metrics: Array<{ slug: string; name: string; kind: 'fixed' | 'rolling'; unit: string }>;
  tiers: DemoTier[];
  reviews: Array<{ rating: number; title: string; body: string }>;
}

const DEMO_AGENTS: DemoAgent[] = [
  {
    slug: 'support-copilot',
    name: 'Support Copilot',
    description: 'Drafts answers to customer support tickets from your help center and past replies.',
    longDescription:
      'Support Copilot reads each new ticket, finds the relevant help-center articles and similar solved tickets, ' +
      'and drafts a reply your agents approve with one click. It learns your tone from past replies.',
    status: 'active',
    tags: ['Customer Support', 'Productivity'],
    capabilities: [
      { title: 'Drafts replies', description: 'Answers grounded in your help center and solved tickets.' },
      { title: 'Triages tickets', description: 'Tags, prioritizes and routes new tickets.' },
      { title: 'Summarizes threads', description: 'One-paragraph summaries of long conversations.' },
    ],
    steps: [
      { title: 'Connect your help desk', description: 'Zendesk, Freshdesk or Help Scout, via OAuth.' },
      { title: 'Import your help center', description: 'Articles are indexed in a few minutes.' },
      { title: 'Approve drafts', description: 'Review, edit and send from your usual inbox.' },
    ],
    changelog: [
      { version: '1.0.0', title: 'Launch', body: 'First public release.', daysAgo: 60 },
      { version: '1.1.0', title: 'Thread summaries', body: 'Summaries for threads longer than five messages.', daysAgo: 14 },
    ],
    metrics: [
      { slug: 'drafts', name: 'Drafted replies', kind: 'rolling', unit: 'reply' },
      { slug: 'seats', name: 'Agent seats', kind: 'fixed', unit: 'seat' },
    ],
    tiers: [
      { name: 'Free', priceCents: 0, features: ['100 drafted replies a month', '1 seat'], quotas: { drafts: 100, seats: 1 } },
      { name: 'Pro', priceCents: 2900, features: ['2,000 drafted replies a month', '5 seats', 'Thread summaries'], quotas: { drafts: 2000, seats: 5 } },
      { name: 'Team', priceCents: 9900, features: ['Unlimited drafted replies', '25 seats', 'Priority support'], quotas: { drafts: null, seats: 25 } },
      { name: 'Partner (custom)', priceCents: 4900, isPublic: false, features: ['Negotiated partner price'], quotas: { drafts: null, seats: 10 } },
    ],
    reviews: [
      { rating: 5, title: 'Halved our first-response time', body: 'Drafts are right most of the time.' },
      { rating: 4, title: 'Great with a good help center', body: 'Needs your articles to be up to date.' },
    ],
  },
  {
    slug: 'sales-scout',
    name: 'Sales Scout',
    description: 'Finds and qualifies leads that match your ideal customer profile, then drafts the first email.',
    longDescription:
      'Sales Scout searches public company data for accounts that look like your best customers, scores them, ' +
      'and writes a personal first email for each qualified lead.',
    status: 'active',
    tags: ['Sales', 'Productivity'],
    capabilities: [
      { title: 'Lead discovery', description: 'Companies matching your ideal customer profile.' },
      { title: 'Lead scoring', description: 'Fit and intent scores with the reasons behind them.' },
      { title: 'First-touch emails', description: 'Personal openers your reps can send as is.' },
    ],
    steps: [
      { title: 'Describe your best customers', description: 'Industry, size, tools they use.' },
      { title: 'Review the first batch', description: 'Thumbs up or down teaches the scorer.' },
      { title: 'Export to your CRM', description: 'HubSpot and Salesforce supported.' },
    ],
    changelog: [{ version: '0.9.0', title: 'Public beta', body: 'Open to everyone.', daysAgo: 30 }],
    metrics: [{ slug: 'leads', name: 'Qualified leads', kind: 'rolling', unit: 'lead' }],
    tiers: [
      { name: 'Starter', priceCents: 1900, features: ['200 qualified leads a month'], quotas: { leads: 200 } },
      { name: 'Growth', priceCents: 49000, interval: 'year', features: ['1,500 qualified leads a month', 'CRM export'], quotas: { leads: 1500 } },
    ],
    reviews: [{ rating: 4, title: 'Good leads, fewer bounces', body: 'The scoring explanations help a lot.' }],
  },
  {
    slug: 'meeting-notes',
    name: 'Meeting Notes',
    description: 'Joins your calls, writes the notes and sends the action items to everyone who attended.',
    longDescription: 'Meeting Notes records, transcribes and summarizes calls on Zoom, Meet and Teams.',
    status: 'active',
    tags: ['Productivity'],
    capabilities: [
      { title: 'Transcripts', description: 'Speaker-labelled transcripts in 30 languages.' },
      { title: 'Action items', description: 'Owners and due dates pulled from the conversation.' },
    ],
    steps: [
      { title: 'Connect your calendar', description: 'The agent joins the meetings you choose.' },
      { title: 'Read the notes', description: 'Delivered by email a minute after the call.' },
    ],
    changelog: [{ version: '2.0.0', title: 'Teams support', body: 'Microsoft Teams meetings are supported.', daysAgo: 7 }],
    metrics: [{ slug: 'meeting-minutes', name: 'Recorded minutes', kind: 'rolling', unit: 'minute' }],
    tiers: [{ name: 'Free', priceCents: 0, features: ['600 recorded minutes a month'], quotas: { 'meeting-minutes': 600 } }],
    reviews: [
      { rating: 5, title: 'Just works', body: 'Notes arrive before I am back at my desk.' },
      { rating: 3, title: 'Fine for English', body: 'Other languages are weaker.' },
    ],
  },
  {
    slug: 'invoice-reader',
    name: 'Invoice Reader',
    description: 'Reads supplier invoices from your inbox and books them in your accounting tool.',
    longDescription: 'Coming soon: extraction of line items, VAT and due dates, with approval flows.',
    status: 'coming_soon',
    tags: ['Finance'],
    capabilities: [{ title: 'Line-item extraction', description: 'Amounts, VAT and due dates from PDFs and photos.' }],
    steps: [{ title: 'Forward your invoices', description: 'A private address per company.' }],
    changelog: [],
    metrics: [{ slug: 'invoices', name: 'Invoices read', kind: 'rolling', unit: 'invoice' }],
    tiers: [{ name: 'Early access', priceCents: 0, features: ['50 invoices a month during early access'], quotas: { invoices: 50 } }],
    reviews: [],
  },
];

const DEMO_REVIEWERS = [
  { email: 'riley.reviewer@example.com', name: 'Riley Reviewer' },
  { email: 'sam.sampler@example.com', name: 'Sam Sampler' },
];

const DAY = 24 * 60 * 60 * 1000;

type SeedDeps = Pick<AppDeps, 'database' | 'clock' | 'auth' | 'logger' | 'config'>;

/**
 * Seeds the demo catalog when the database has no agents. Returns whether it did. Instances starting together in
 * development on one database take turns (inTurn): the first seeds, the others find agents. Without it each saw an
 * empty catalog, the demo accounts' unique emails refused all but one, and those instances crashed at start.
 */
export async function seedDemoCatalog(deps: SeedDeps): Promise<{ seeded: boolean }> {
  if (deps.config.isProduction) return { seeded: false };
  return inTurn(deps.database, 'seed_demo_catalog', () => seedEmpty(deps));
}

async function seedEmpty(deps: SeedDeps): Promise<{ seeded: boolean }> {
  const db = deps.database.db;
  const existing = await first<{ any: boolean }>(db, sql`select exists (select 1 from public.agents) as any`);
  if (existing?.any) return { seeded: false };

  const reviewerIds: string[] = [];
  for (const reviewer of DEMO_REVIEWERS) {
    const found = await first<{ id: string }>(db, sql`select id from "user" where email = ${reviewer.email}`);
    if (found) {
      reviewerIds.push(found.id);
      continue;
    }
    // A real account with a random password nobody knows: it exists to author the demo reviews.
    const { user } = await deps.auth.api.signUpEmail({
      body: { email: reviewer.email, password: crypto.randomUUID(), name: reviewer.name },
    });
    reviewerIds.push(user.id);
  }

  const now = deps.clock.now();
  for (const [index, demo] of DEMO_AGENTS.entries()) {
    // Older agents first, so the newest-first list shows them in the order written above; all listed before the
    // demo subscriptions of the last weeks (seedDemoActivity).
    const at = new Date(now.getTime() - (ACTIVITY_DAYS + DEMO_AGENTS.length - index) * DAY);
    const agent = await createAgent({ clock: { now: () => at } }, db, {
      slug: demo.slug,
      name: demo.name,
      description: demo.description,
      longDescription: demo.longDescription,
      status: demo.status,
      tags: demo.tags,
      capabilities: demo.capabilities,
      steps: demo.steps,
      redirectUris: [`http://127.0.0.1:5173/agents/${demo.slug}/oauth/callback`],
    });
    for (const entry of demo.changelog) {
      await addChangelogEntry(db, agent.id, entry, new Date(now.getTime() - entry.daysAgo * DAY));
    }
    const metricIds: Record<string, string> = {};
    for (const metric of demo.metrics) {
      const row = await first<{ id: string }>(
        db,
        sql`insert into public.metric_definitions (agent_id, slug, name, kind, unit, created_at, updated_at)
            values (${agent.id}, ${metric.slug}, ${metric.name}, ${metric.kind}, ${metric.unit}, ${at}, ${at}) returning id`,
      );
      metricIds[metric.slug] = row!.id;
    }
    for (const tier of demo.tiers) {
      const created = await insertTier(
        db,
        {
          agentId: agent.id,
          name: tier.name,
          priceCents: tier.priceCents,
          currency: 'usd',
          interval: tier.interval ?? 'month',
          isPublic: tier.isPublic ?? true,
          features: tier.features,
        },
        at,
      );
      for (const [slug, limit] of Object.entries(tier.quotas)) {
        await sql`insert into public.tier_quotas (tier_id, metric_id, quota_limit, updated_at)
                  values (${created.id}, ${metricIds[slug]!}, ${limit}, ${at})`.execute(db);
      }
    }
    for (const [i, review] of demo.reviews.entries()) {
      await upsertReview(db, { agentId: agent.id, userId: reviewerIds[i % reviewerIds.length]!, ...review }, new Date(now.getTime() - (i + 1) * DAY), false);
    }
    if (demo.status === 'coming_soon') {
      await joinWaitlist(db, { id: agent.id, status: demo.status }, { email: DEMO_REVIEWERS[0]!.email, userId: reviewerIds[0]! }, now);
    }
  }
  const activity = await seedDemoActivity(deps);
  deps.logger.info('demo catalog seeded', { agents: DEMO_AGENTS.length, ...activity });
  return { seeded: true };
}

/** How far back the demo subscriptions go: inside the admin page's default 90-day window. */
const ACTIVITY_DAYS = 56;
const DEMO_SUBSCRIBERS = 14;

/**
 * Demo activity, so the admin page and the usage reads show real figures on first start: subscribers who joined
 * the active agents' free tiers over the last eight weeks (through startFreeSubscription, at their join time),
 * metered usage in the days after (through meterUsage, the same SQL rule as the API: counters and ledger agree),
 * and a few cancellations. Deterministic: the same figures on every fresh start.
 */
async function seedDemoActivity(
  deps: Pick<AppDeps, 'database' | 'clock' | 'auth'>,
): Promise<{ subscriptions: number; increments: number; cancellations: number }> {
  const db = deps.database.db;
  const now = deps.clock.now().getTime();
  const freeTiers = await rows<{ tier_id: string; agent_id: string; metric: string }>(
    db,
    sql`select t.id as tier_id, t.agent_id, m.slug as metric
          from public.tiers t
          join public.agents a on a.id = t.agent_id and a.status = 'active'
          join public.metric_definitions m on m.agent_id = t.agent_id and m.kind = 'rolling'
         where t.price_cents = 0
         order by a.slug, m.slug`,
  );
  if (freeTiers.length === 0) return { subscriptions: 0, increments: 0, cancellations: 0 };
  let increments = 0;
  let cancellations = 0;
  for (let i = 0; i < DEMO_SUBSCRIBERS; i++) {
    // A real account made the way an admin makes one (the admin plugin's createUser, called in process): no
    // verification mail for a demo address, and no password (nobody signs in as it; no hashing at start-up). Not
    // verified: nobody owns these addresses, and an admin cannot vouch for one (auth/library-input.ts).
    const { user } = await deps.auth.api.createUser({
      body: { email: `demo.subscriber${i + 1}@example.com`, name: `Demo Subscriber ${i + 1}` },
    });
    const tier = freeTiers[i % freeTiers.length]!;
    const joined = now - Math.round(((DEMO_SUBSCRIBERS - i) / DEMO_SUBSCRIBERS) * ACTIVITY_DAYS * DAY) + 3_600_000;
    const at = (t: number) => ({ now: () => new Date(t) });
    const { subscription } = await startFreeSubscription(db, at(joined), { userId: user.id, tierId: tier.tier_id });
    // Most use the agent for a few days after joining; every fifth never does (the funnel's purchased > activated).
    const activeDays = i % 5 === 4 ? 0 : 1 + (i % 4) * 2;
    for (let d = 0; d < activeDays; d++) {
      const when = joined + (d + 1) * DAY / 2;
      if (when >= now) break;
      await meterUsage(db, at(when), 'increment', {
        userId: user.id,
        agentId: tier.agent_id,
        metricSlug: tier.metric,
        clientReqId: `demo-${i}-${d}`,
        amount: 3 + ((i * 7 + d * 5) % 11),
      });
      increments++;
    }
    // Every fourth cancels two weeks in (a free subscription ends at once when canceled: billing.md).
    const canceledAt = joined + 14 * DAY;
    if (i % 4 === 1 && canceledAt < now) {
      await sql`update public.subscriptions set status = 'canceled', canceled_at = ${new Date(canceledAt)}, updated_at = ${new Date(canceledAt)}
                where id = ${subscription.id}`.execute(db);
      cancellations++;
    }
  }
  return { subscriptions: DEMO_SUBSCRIBERS, increments, cancellations };
}

async function main() {
  const { buildDeps } = await import('../functions/deps.ts');
  const { loadConfig } = await import('../functions/platform/config.ts');
  const { createLogger } = await import('../functions/platform/logger.ts');
  const { migrate } = await import('../functions/platform/migrations.ts');
  const { openConfiguredDatabase, withPersistedSecret } = await import('../functions/platform/node-runtime.ts');
  const logger = createLogger();
  const config = loadConfig(withPersistedSecret(process.env));
  const database = await openConfiguredDatabase(config);
  await migrate(database);
  const deps = await buildDeps({ config, database, logger });
  const { seeded } = await seedDemoCatalog(deps);
  console.log(seeded ? 'Demo catalog seeded.' : 'Not seeded: the database already has agents (or NODE_ENV=production).');
  await database.close();
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch(async (err) => {
    (await import('../functions/platform/embedded-database-lock.ts')).exitIfDatabaseInUse(err);
    console.error(err);
    process.exit(1);
  });
}
