-- The housekeeping runs 5 minutes behind the database's clock (review 99).
--
-- It has run at the database's clock since review 25 (an instance whose clock ran ahead pruned sessions, links and
-- rate-limit windows early when it ran at its own). But most of what it settles was stamped by an instance's clock: a
-- hold's expires_at (the instance's now + ttl), a rate-limit window's window_end, a session's expiresAt. With one
-- instance's clock behind the database's, the housekeeping expired that instance's holds while they were still live by
-- every rule the agent sees (a commit inside the ttl answered 422 INVALID_STATE, the user's work went uncounted, a
-- reservation.expired webhook went out for a hold in use) and deleted rate-limit windows still running (a per-minute
-- limit of that instance started again after each drain). Running it at now() - 5 minutes gives the instances' clocks
-- that much room either way; what it settles later for it is settled anyway by the next read that needs it (an expired
-- hold by the next read of its counter or of the reservation, at the reader's clock), and the rest (expired sessions,
-- links, done mails) is only pruned later. Instances are expected to keep their clocks synchronised (NTP); the margin
-- is for a clock that slipped, docs/operations.md.
--
-- One definition: `public.background_housekeeping()` is what every scheduler calls (the pg_cron job below, the drain
-- and the Node loop in functions/internal/background-work.ts); `background_housekeeping(p_now)` stays, for tests at a
-- chosen time.

create function public.background_housekeeping()
returns jsonb
language sql volatile
set search_path = public, pg_temp
as $$
  select public.background_housekeeping(now() - interval '5 minutes')
$$;
revoke execute on function public.background_housekeeping() from public, anon, authenticated;

-- The job's command, restated from 20261123000700.
create or replace function public.schedule_background_jobs()
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
    using 'marketplace-housekeeping', '* * * * *', 'select public.background_housekeeping()';
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
revoke execute on function public.schedule_background_jobs() from public, anon, authenticated;

-- The job already scheduled runs the new command (cron.schedule by name updates it). Where pg_cron is not usable from
-- this database (another database is cron.database_name, no privilege), a notice, as in 20261123000700.
do $$
begin
  if to_regnamespace('cron') is not null then
    begin
      perform public.schedule_background_jobs();
    exception when others then
      raise notice 'pg_cron jobs not rescheduled: %', sqlerrm;
    end;
  end if;
end
$$;
