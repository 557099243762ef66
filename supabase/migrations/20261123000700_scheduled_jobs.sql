-- Background work without a long-lived process of ours (issue 14).
--
-- The service runs as many short-lived instances (Edge isolates, Node processes behind a balancer). Work that must
-- happen whether or not anyone is calling is run by the scheduler the platform provides:
--   - SQL work runs in SQL: public.background_housekeeping(now) prunes the revocation list and the ended rate-limit
--     windows and settles expired usage reservations. pg_cron runs it every minute.
--   - Work that needs the application (mail over SMTP, agent webhooks over HTTP) is drained by the service's
--     POST /internal/drain (functions/internal/), which claims what it sends with FOR UPDATE SKIP LOCKED, so any
--     number of concurrent drains send each mail and delivery once. pg_cron asks for a drain through pg_net
--     (public.request_background_drain), every 10 seconds where pg_cron supports seconds (1.5+, as on Supabase),
--     else every minute. The URL and the token come from Supabase Vault at run time (never from this file):
--       select vault.create_secret('https://<ref>.supabase.co/functions/v1/api/internal/drain', 'marketplace_drain_url');
--       select vault.create_secret('<the DRAIN_TOKEN of the function>', 'marketplace_drain_token');
--     Until both exist the job does nothing (a notice in cron.job_run_details says why).
--
-- Where pg_cron is missing or cannot be enabled here (PGlite, a plain server without shared_preload_libraries =
-- 'pg_cron', a database other than cron.database_name) this migration schedules nothing and succeeds; README.md
-- ("Background work") says what to run instead. Enabled pg_cron later? `select public.schedule_background_jobs();`
-- creates (or updates) the jobs; it is idempotent.

-- ---------------------------------------------------------------------------------------------------------
-- The SQL housekeeping, at the caller's clock (pg_cron passes now(); the drain endpoint the service's clock).
-- Every part is idempotent and safe to run concurrently with itself. Returns what it did.
-- ---------------------------------------------------------------------------------------------------------
create function public.background_housekeeping(p_now timestamptz)
returns jsonb
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_revoked integer;
  v_rate_limits integer;
  v_reservations integer;
begin
  -- A revocation-list row only matters until the last access token it covers has expired.
  with gone as (delete from public.revoked_tokens where expires_at < p_now returning 1)
  select count(*)::integer into v_revoked from gone;
  v_rate_limits := public.rate_limit_prune(p_now);
  -- Bounded per run; the rest waits for the next run (or for the next read of its counter, which settles it lazily).
  v_reservations := public.metering_expire_reservations(p_now, 1000);
  return jsonb_build_object('revokedTokensPruned', v_revoked, 'rateLimitsPruned', v_rate_limits,
                            'reservationsExpired', v_reservations);
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Asks the service to drain its outboxes: one POST through pg_net (asynchronous: pg_net's worker sends it and keeps
-- the answer in net._http_response). Reads the target from Vault on every run, so rotating the token or moving the
-- function needs no migration. Returns pg_net's request id, or null when pg_net, Vault or the secrets are missing.
-- Dynamic SQL: the net and vault schemas may not exist where this function is created.
-- ---------------------------------------------------------------------------------------------------------
create function public.request_background_drain()
returns bigint
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_url text;
  v_token text;
  v_request bigint;
begin
  if to_regnamespace('net') is null then
    raise notice 'background drain: pg_net is not installed here';
    return null;
  end if;
  if to_regclass('vault.decrypted_secrets') is null then
    raise notice 'background drain: Supabase Vault is not installed here';
    return null;
  end if;
  execute $q$select max(decrypted_secret) filter (where name = 'marketplace_drain_url'),
                    max(decrypted_secret) filter (where name = 'marketplace_drain_token')
               from vault.decrypted_secrets
              where name in ('marketplace_drain_url', 'marketplace_drain_token')$q$
    into v_url, v_token;
  if v_url is null or v_token is null then
    raise notice 'background drain: set the Vault secrets marketplace_drain_url and marketplace_drain_token';
    return null;
  end if;
  execute 'select net.http_post(url := $1, body := $2, headers := $3, timeout_milliseconds := $4)'
    using v_url, '{}'::jsonb,
          jsonb_build_object('Content-Type', 'application/json', 'Authorization', 'Bearer ' || v_token),
          55000
    into v_request;
  return v_request;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Creates or updates the pg_cron jobs (by name, so running it again changes nothing): the housekeeping always, the
-- drain request when pg_net is there. Returns the names of the jobs it scheduled (empty without pg_cron).
-- ---------------------------------------------------------------------------------------------------------
create function public.schedule_background_jobs()
returns text[]
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_version int[];
  v_jobs text[] := '{}';
begin
  if to_regnamespace('cron') is null then
    return v_jobs;
  end if;
  -- '1.4-1' -> {1,4}; schedules in seconds came with pg_cron 1.5.
  select string_to_array(split_part(extversion, '-', 1), '.')::int[] into v_version
    from pg_extension where extname = 'pg_cron';
  execute 'select cron.schedule($1, $2, $3)'
    using 'marketplace-housekeeping', '* * * * *', 'select public.background_housekeeping(now())';
  v_jobs := v_jobs || 'marketplace-housekeeping'::text;
  if to_regnamespace('net') is not null then
    execute 'select cron.schedule($1, $2, $3)'
      using 'marketplace-drain',
            case when v_version >= array[1, 5] then '10 seconds' else '* * * * *' end,
            'select public.request_background_drain()';
    v_jobs := v_jobs || 'marketplace-drain'::text;
  end if;
  return v_jobs;
end
$$;

revoke execute on function public.background_housekeeping(timestamptz) from public, anon, authenticated;
revoke execute on function public.request_background_drain() from public, anon, authenticated;
revoke execute on function public.schedule_background_jobs() from public, anon, authenticated;

-- Enable pg_cron (and pg_net beside it) where this server can, then schedule. Each attempt is its own
-- subtransaction: a failure (not preloaded, another database is cron.database_name, no privilege) is a notice.
do $$
begin
  if to_regnamespace('cron') is null and exists (select 1 from pg_available_extensions where name = 'pg_cron') then
    begin
      create extension if not exists pg_cron;
    exception when others then
      raise notice 'pg_cron is not enabled here (%): run the background work another way (README.md, "Background work")', sqlerrm;
    end;
  end if;
  if to_regnamespace('cron') is not null and to_regnamespace('net') is null
     and exists (select 1 from pg_available_extensions where name = 'pg_net') then
    begin
      create extension if not exists pg_net;
    exception when others then
      raise notice 'pg_net is not enabled here (%): pg_cron runs the SQL housekeeping only', sqlerrm;
    end;
  end if;
  begin
    perform public.schedule_background_jobs();
  exception when others then
    raise warning 'pg_cron is enabled but the background jobs could not be scheduled (%): see README.md, "Background work"', sqlerrm;
  end;
end
$$;
