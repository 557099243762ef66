import { describe, expect, it } from 'vitest';
import { rows, sql } from '../../functions/platform/db.ts';
import { useTestDatabase } from '../support/databases.ts';

/**
 * Functions that write are the service's (migration 20261125000400): no volatile function of the public schema may be
 * executed by the Data API's roles (anon, authenticated), which would otherwise reach it through PostgREST's /rpc;
 * trigger functions neither (review 100, migration 20261127007200: EXECUTE is what CREATE TRIGGER asks of whoever
 * attaches one). The rule is checked over the catalog, so a function added later without its revoke fails here.
 */

const db = useTestDatabase();

describe('function privileges', () => {
  it('no volatile function of the public schema is executable by anon or authenticated', async () => {
    const open = await rows<{ fn: string; role: string }>(
      db(),
      sql`select p.oid::regprocedure::text as fn, r.rolname as role
            from pg_proc p
            join pg_namespace n on n.oid = p.pronamespace
            cross join pg_roles r
           where n.nspname = 'public' and p.prokind = 'f' and p.provolatile = 'v'
             and r.rolname in ('anon', 'authenticated')
             and has_function_privilege(r.rolname, p.oid, 'execute')
           order by 1, 2`,
    );
    expect(open).toEqual([]);
    // the check is not empty-handed: the writing functions exist, and the service's own role can run them
    const writers = await rows<{ n: number }>(
      db(),
      sql`select count(*)::int as n from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'public' and p.proname in ('metering_increment', 'metering_decrement', 'metering_batch_as_bearer')
             and has_function_privilege(current_user, p.oid, 'execute')`,
    );
    expect(writers[0]!.n).toBeGreaterThanOrEqual(3);
  });

  it('the security-definer functions anon and authenticated may execute, of any volatility, are the review check by review id, the catalog’s review totals and the token check', async () => {
    // A security-definer function reads past row-level security for whoever calls it, stable or not: one by user id
    // told anyone whether an account was banned (rule 27, found by reviews). A new one open to these roles must be
    // looked at and added here on purpose. data_api_token_reaches answers only about the caller's own token (its
    // claims, no user id given), which the owner-read policies ask (review 22), authenticated only. catalog_review_totals
    // answers a published agent's review count and average, net of every ban, as GET /agents shows them (review 60).
    const open = await rows<{ fn: string }>(
      db(),
      sql`select distinct p.oid::regprocedure::text as fn
            from pg_proc p
            join pg_namespace n on n.oid = p.pronamespace
            cross join pg_roles r
           where n.nspname = 'public' and p.prosecdef
             and r.rolname in ('anon', 'authenticated')
             and has_function_privilege(r.rolname, p.oid, 'execute')
           order by 1`,
    );
    expect(open.map((f) => f.fn)).toEqual(['catalog_review_totals(uuid)', 'data_api_token_reaches(uuid)', 'review_shown(uuid)']);
    // Each pins its search_path with pg_temp last: unnamed, pg_temp is searched first for tables, so a session that
    // could create temporary tables would have its own "user" or reviews read in their place (review 60).
    const paths = await rows<{ fn: string; config: string[] | null }>(
      db(),
      sql`select p.oid::regprocedure::text as fn, p.proconfig as config from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'public' and p.oid::regprocedure::text = any (${open.map((f) => f.fn)}::text[]) order by 1`,
    );
    for (const { fn, config } of paths) expect(config, fn).toContain('search_path=pg_catalog, public, pg_temp');
  });
});
