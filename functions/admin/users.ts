import { z } from '@hono/zod-openapi';
import { BANNED_NOW, bannedUserSchema, getUser, toUserDto, type UserRow } from '../auth/index.ts';
import { subscriptionSchema, subscriptionsWithAgentAndTier } from '../billing/index.ts';
import type { Pagination } from '../http/envelope.ts';
import { textParam } from './params.ts';
import { finishPage, pageScope, readPage, type CursorSigner } from '../http/pagination.ts';
import type { Clock } from '../platform/clock.ts';
import { first, rows, sql, type Db, type RawBuilder } from '../platform/db.ts';

/**
 * Users as admins see them: the list with a subscription summary per user, and one user's profile with their
 * subscriptions (joined with agent and tier) and organization memberships.
 *
 * Summary definitions (docs/admin.md):
 *   subscriptionCount  = live subscriptions (every status except `canceled`);
 *   monthlySpendCents  = sum of the current tier's price over paying subscriptions (`active` or `past_due`,
 *                        price > 0) priced in the platform currency (PLATFORM_CURRENCY), a yearly price counted as
 *                        price / 12, rounded to whole minor units at the end. Canceled, free and `incomplete` (never
 *                        paid) subscriptions add nothing.
 *   monthlySpendByCurrency = the same sum per currency, each in that currency's minor units (a zero-decimal currency
 *                        such as JPY: whole yen), since 2,900 cents and 2,900 euro cents and 1,000 yen are no one number.
 */

const spendSchema = {
  subscriptionCount: z.int().openapi({ description: 'Live subscriptions (any status except canceled)' }),
  monthlySpendCents: z.int().openapi({
    description:
      'Monthly spend of paying (active, past_due) subscriptions priced in the platform currency (PLATFORM_CURRENCY, default usd), ' +
      'in its minor units; yearly prices / 12; free and canceled excluded; other currencies are in monthlySpendByCurrency',
  }),
  monthlySpendByCurrency: z
    .array(
      z.object({
        currency: z.string().openapi({ example: 'eur' }),
        amountMinor: z.int().openapi({ description: "In the currency's minor units, as tiers' priceCents (JPY: whole yen)" }),
      }),
    )
    .openapi({ description: 'The monthly spend per currency, currencies in alphabetical order; empty when nothing is paid' }),
};

export const adminUserSchema = bannedUserSchema.extend(spendSchema).openapi('AdminUser');
export type AdminUser = z.infer<typeof adminUserSchema>;

export const userSubscriptionSchema = subscriptionSchema
  .extend({
    agent: z.object({ id: z.uuid(), slug: z.string(), name: z.string(), status: z.string() }),
    tier: z.object({
      id: z.uuid(),
      name: z.string(),
      priceCents: z.int(),
      currency: z.string(),
      interval: z.enum(['month', 'year']),
    }),
  })
  .openapi('UserSubscription');

export const membershipSchema = z
  .object({
    organizationId: z.string(),
    name: z.string(),
    slug: z.string(),
    role: z.string().openapi({ example: 'owner' }),
    joinedAt: z.string(),
  })
  .openapi('OrganizationMembership');

export const userProfileSchema = adminUserSchema
  .extend({
    banExpires: z.string().nullable().openapi({ description: 'When a temporary ban ends; null for a permanent ban or none' }),
    subscriptions: z.array(userSubscriptionSchema).openapi({ description: 'Every subscription, newest first' }),
    organizations: z.array(membershipSchema),
  })
  .openapi('UserProfile');
export type UserProfile = z.infer<typeof userProfileSchema>;

export const listUsersQuerySchema = z.object({
  q: z
    .string()
    .trim()
    .pipe(textParam('q', 200))
    .optional()
    .openapi({ param: { name: 'q', in: 'query' }, description: 'Case-insensitive substring of the email or the name' }),
});

/**
 * Live-subscription count and monthly spend of the user aliased `u` (one indexed lookup per user): the spend per
 * currency as a JSON array, each sum rounded once; the platform currency's figure is read out of it.
 */
const summaryOf = (user: RawBuilder<unknown>) => sql`
  select (select count(*) from public.subscriptions s where s.user_id = ${user} and s.status <> 'canceled') as subscription_count,
         coalesce((select json_agg(json_build_object('currency', x.currency, 'amountMinor', x.amount) order by x.currency)
                   from (select t.currency, round(sum(case when t.interval = 'year' then t.price_cents / 12.0 else t.price_cents end))::bigint as amount
                         from public.subscriptions s
                         join public.tiers t on t.id = s.tier_id
                         where s.user_id = ${user} and public.subscription_grants_access(s.status) and t.price_cents > 0
                         group by t.currency) x), '[]'::json) as spend`;

type Spend = { currency: string; amountMinor: number }[];

interface AdminUserRow extends UserRow {
  subscription_count: number;
  spend: Spend | string;
}

function spendOf(row: { subscription_count: number; spend: Spend | string } | undefined, platformCurrency: string) {
  const spend = (typeof row?.spend === 'string' ? (JSON.parse(row.spend) as Spend) : (row?.spend ?? [])).map((s) => ({
    currency: s.currency,
    amountMinor: Number(s.amountMinor),
  }));
  return {
    subscriptionCount: Number(row?.subscription_count ?? 0),
    monthlySpendCents: spend.find((s) => s.currency === platformCurrency)?.amountMinor ?? 0,
    monthlySpendByCurrency: spend,
  };
}

function toAdminUser(row: AdminUserRow, platformCurrency: string): AdminUser {
  return { ...toUserDto(row), ...spendOf(row, platformCurrency) };
}

/** `%`, `_` and `\` in a search are literal characters, not patterns. */
const likePattern = (q: string) => `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

export async function listUsers(
  db: Db,
  cursors: CursorSigner,
  platformCurrency: string,
  query: { q?: string | undefined; cursor?: string | undefined; limit?: number | undefined },
): Promise<{ items: AdminUser[]; pagination: Pagination }> {
  const page = await readPage(cursors, pageScope('admin/users', { q: query.q }), query);
  const byText = query.q
    ? sql`(u.email ilike ${likePattern(query.q)} or u.name ilike ${likePattern(query.q)})`
    : sql`true`;
  // The user table is the auth library's: its columns are camelCase, so the shared afterCursor (created_at)
  // does not apply; same keyset, spelled for this table.
  const after = page.after ? sql`(u."createdAt", u.id) < (${page.after.createdAt}, ${page.after.id})` : sql`true`;
  const found = await rows<AdminUserRow>(
    db,
    sql`select u.id, u.email, u.name, u.role, ${BANNED_NOW} as banned, u."banReason", u."createdAt", x.subscription_count, x.spend
        from "user" u
        cross join lateral (${summaryOf(sql`u.id`)}) x
        where ${byText} and ${after}
        order by u."createdAt" desc, u.id desc
        limit ${page.limit + 1}`,
  );
  return finishPage(cursors, page, found.map((row) => toAdminUser(row, platformCurrency)));
}

export async function getUserProfile(db: Db, clock: Clock, platformCurrency: string, userId: string): Promise<UserProfile> {
  const user = await getUser(db, userId); // 404 for an unknown id
  const extra = await first<{ banExpires: Date | string | null; subscription_count: number; spend: Spend | string }>(
    db,
    sql`select u."banExpires", x.subscription_count, x.spend
        from "user" u cross join lateral (${summaryOf(sql`u.id`)}) x
        where u.id = ${userId}`,
  );
  const subscriptions = await subscriptionsWithAgentAndTier(db, clock, userId);
  const memberships = await rows<{ id: string; name: string; slug: string; role: string; joined_at: Date | string }>(
    db,
    sql`select o.id, o.name, o.slug, m.role, m."createdAt" as joined_at
        from "member" m join "organization" o on o.id = m."organizationId"
        where m."userId" = ${userId}
        order by m."createdAt", o.id`,
  );
  return {
    ...user,
    ...spendOf(extra, platformCurrency),
    banExpires: extra?.banExpires ? new Date(extra.banExpires).toISOString() : null,
    subscriptions,
    organizations: memberships.map((m) => ({
      organizationId: m.id,
      name: m.name,
      slug: m.slug,
      role: m.role,
      joinedAt: new Date(m.joined_at).toISOString(),
    })),
  };
}
