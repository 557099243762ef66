-- The Data API's roles hold no write, TRIGGER or REFERENCES privilege on any table, and execute no trigger function
-- (review 100).
--
-- Review 60 took TRUNCATE from anon and authenticated (20261127005500): Supabase's default privileges grant every
-- table privilege to them, and TRUNCATE ignores row-level security. The same defaults grant TRIGGER and REFERENCES,
-- and nothing took those: a SQL session as anon could attach a trigger to public.agents (or subscriptions, reviews,
-- agent_oauth_clients, ...) whose function then ran whenever the service wrote the table, as the service's own role,
-- past row-level security; REFERENCES lets a foreign key of one's own probe whether a key exists in a table whose rows
-- are hidden. PostgREST and pg_graphql run no DDL, so the Data API alone could not do it; but the rule is that these
-- roles change nothing, and no policy lets them write anyway (every write of the marketplace is the service's). So:
--   * INSERT, UPDATE, DELETE, REFERENCES and TRIGGER on every table of public are taken from anon and authenticated,
--     and from the defaults for tables made later by the same owner (TRUNCATE was, by 20261127005500);
--   * EXECUTE on every trigger function of public is taken from them and from PUBLIC (a trigger function runs as a
--     trigger whoever writes the table; only CREATE TRIGGER asks for EXECUTE), as every other writing function's
--     already was (tests/foundation/function-privileges.test.ts now counts trigger functions too).

revoke insert, update, delete, references, trigger on all tables in schema public from anon, authenticated;
alter default privileges in schema public revoke insert, update, delete, references, trigger on tables from anon, authenticated;

do $$
declare
  f regprocedure;
begin
  for f in
    select p.oid::regprocedure from pg_proc p
     where p.pronamespace = 'public'::regnamespace and p.prorettype = 'trigger'::regtype
  loop
    execute format('revoke execute on function %s from public, anon, authenticated', f);
  end loop;
end
$$;
