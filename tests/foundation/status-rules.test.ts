import { describe, expect, it } from 'vitest';
import { isPublished } from '../../functions/catalog/agents.ts';
import { agentStatusSchema } from '../../functions/catalog/schemas.ts';
import { grantsAccess, SUBSCRIPTION_STATUSES } from '../../functions/billing/subscriptions.ts';
import { first, rows, sql } from '../../functions/platform/db.ts';
import { useTestDatabase } from '../support/databases.ts';

/**
 * "Published agent" and "a subscription that grants access" are each defined once, in SQL
 * (public.agent_is_published, public.subscription_grants_access; migration 20261125000100), and every policy,
 * view and SQL function calls the predicate instead of spelling the status list out again. The TypeScript
 * mirrors, used on rows already read, must agree with SQL on every status the schema allows, and the predicates
 * must inline (the planner sees the plain status test, so plans and indexes are as with the literal).
 */

const db = useTestDatabase();

describe('one definition per status rule', () => {
  it('the TypeScript mirrors agree with the SQL predicates on every status', async () => {
    for (const status of agentStatusSchema.options) {
      const row = await first<{ published: boolean }>(db(), sql`select public.agent_is_published(${status}) as published`);
      expect({ status, published: row!.published }).toEqual({ status, published: isPublished(status) });
    }
    for (const status of SUBSCRIPTION_STATUSES) {
      const row = await first<{ grants: boolean }>(db(), sql`select public.subscription_grants_access(${status}) as grants`);
      expect({ status, grants: row!.grants }).toEqual({ status, grants: grantsAccess(status) });
    }
    expect(agentStatusSchema.options.filter(isPublished)).toEqual(['active', 'coming_soon']);
    expect(SUBSCRIPTION_STATUSES.filter(grantsAccess)).toEqual(['active', 'past_due']);
  });

  it('no policy, view or function but the predicates spells a status list out', async () => {
    const spelled = sql`~ ${"'(coming_soon|past_due)'"}`;
    const found = await rows<{ kind: string; name: string }>(
      db(),
      sql`select 'policy' as kind, tablename || '.' || policyname as name from pg_policies
            where schemaname = 'public' and (coalesce(qual, '') || coalesce(with_check, '')) ${spelled}
          union all
          select 'view', viewname from pg_views where schemaname = 'public' and definition ${spelled}
          union all
          select 'function', p.proname from pg_proc p
            where p.pronamespace = 'public'::regnamespace and p.prosrc ${spelled}
              and p.proname not in ('agent_is_published', 'subscription_grants_access')
          order by 1, 2`,
    );
    expect(found).toEqual([]);
    // The scan does see a spelled-out list where one is: the predicates themselves.
    const predicates = await rows<{ proname: string }>(
      db(),
      sql`select proname from pg_proc where pronamespace = 'public'::regnamespace and prosrc ${spelled} order by 1`,
    );
    expect(predicates.map((p) => p.proname)).toEqual(['agent_is_published', 'subscription_grants_access']);
  });

  it('the predicates are inlined: the plan filters on the status list itself', async () => {
    const plan = await rows<{ 'QUERY PLAN': string }>(
      db(),
      sql`explain (costs off) select id from public.agents where public.agent_is_published(status)`,
    );
    const text = plan.map((line) => line['QUERY PLAN']).join('\n');
    expect(text).toContain('coming_soon');
    expect(text).not.toContain('agent_is_published');
  });
});
