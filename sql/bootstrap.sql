-- What Supabase provides and a plain Postgres (or PGlite) lacks: the API roles and the JWT-claims helpers
-- that RLS policies use. Every statement only creates what is missing, so on Supabase this changes nothing.
-- PostgREST sets `request.jwt.claims` and switches to the role named in the token; tests do the same with
-- `set local role` and `set_config('request.jwt.claims', ...)`.
-- Policies read the user as `auth.jwt() ->> 'sub'` (text), not Supabase's `auth.uid()` (uuid), because user ids
-- are Better Auth's text ids.

do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'anon') then
    create role anon nologin noinherit;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'authenticated') then
    create role authenticated nologin noinherit;
  end if;
  if not exists (select 1 from pg_roles where rolname = 'service_role') then
    create role service_role nologin noinherit bypassrls;
  end if;
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
