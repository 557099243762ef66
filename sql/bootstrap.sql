-- What Supabase provides and a plain Postgres (or PGlite) lacks: the API roles and the JWT-claims helpers
-- that RLS policies use. Every statement only creates what is missing, so on Supabase this changes nothing.
-- PostgREST sets `request.jwt.claims` and switches to the role named in the token; tests do the same with
-- `set local role` and `set_config('request.jwt.claims', ...)`.
-- Policies read the user as `auth.jwt() ->> 'sub'` (text), not Supabase's `auth.uid()` (uuid), because user ids
-- are Better Auth's text ids.

-- Roles belong to the whole cluster, but the migration runner's turn (an advisory lock) holds only within one
-- database: services on two databases of one new cluster, starting at once, can both find a role missing. The later
-- one then waits for the earlier one's commit and fails on the role's unique name; the role exists by then, which is
-- all this asks, so that failure is caught (in a subtransaction of its own) and the start goes on.
do $$
declare
  wanted constant text[][] := array[
    ['anon', 'nologin noinherit'],
    ['authenticated', 'nologin noinherit'],
    ['service_role', 'nologin noinherit bypassrls']];
begin
  for i in 1 .. array_length(wanted, 1) loop
    if not exists (select 1 from pg_roles where rolname = wanted[i][1]) then
      begin
        execute format('create role %I %s', wanted[i][1], wanted[i][2]);
      exception when unique_violation or duplicate_object then
        null; -- another database's start created it meanwhile
      end;
    end if;
  end loop;
end
$$;

create schema if not exists auth;
grant usage on schema auth to anon, authenticated, service_role;
grant usage on schema public to anon, authenticated, service_role;

do $$
begin
  if not exists (select 1 from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                 where n.nspname = 'auth' and p.proname = 'jwt') then
    execute $f$
      create function auth.jwt() returns jsonb language sql stable as $body$
        select coalesce(nullif(current_setting('request.jwt.claims', true), ''), '{}')::jsonb
      $body$
    $f$;
  end if;
end
$$;
