-- Request rate limits shared by every instance of the service (functions/http/rate-limit.ts).
--
-- Production runs many short-lived instances (edge isolates, several Node processes) over one database; counting
-- in process memory would give each its own budget. So the count lives here: one row per key (`<bucket>|<client
-- address>` for the per-address limits, `signin-failures|<sha256 of the lower-cased email>` for failed sign-ins per
-- account), a fixed window that opens with the key's first hit and lasts `p_window_ms`. One statement per check
-- (public.rate_limit_hit), admitted or refused atomically, so N concurrent requests over any number of instances
-- admit exactly the limit.
--
-- Expired windows are removed without a long-lived process: every check deletes a few expired rows on its way
-- (skipping rows another check holds), and public.rate_limit_prune(now) removes them all, for a scheduler
-- (pg_cron) or an operator to call. Nothing depends on either for correctness: an expired row is simply reset.

create table public.rate_limits (
  key text primary key,
  window_start timestamptz(3) not null,
  window_end timestamptz(3) not null,
  hits integer not null check (hits >= 0)
);
create index rate_limits_window_end_idx on public.rate_limits (window_end);
alter table public.rate_limits enable row level security;
revoke all on public.rate_limits from anon, authenticated;

-- Counts one request against `p_key`: admitted while the window holds fewer than `p_limit` hits. A window that has
-- ended starts over at this hit. A refused request is not counted. Only the end of a window is compared with the
-- caller's clock, so instances whose clocks differ a little never reset each other's windows early.
-- retry_after_ms: until the window ends (refused requests only; 0 when admitted).
create function public.rate_limit_hit(p_key text, p_limit integer, p_window_ms integer, p_now timestamptz)
returns table (allowed boolean, retry_after_ms bigint)
language plpgsql as $$
declare
  v_end timestamptz;
begin
  delete from public.rate_limits
   where key in (select r.key from public.rate_limits r
                  where r.window_end < p_now - interval '1 minute'
                  order by r.window_end limit 16 for update skip locked);

  insert into public.rate_limits as r (key, window_start, window_end, hits)
  values (p_key, p_now, p_now + p_window_ms * interval '1 millisecond', 1)
  on conflict (key) do update
     set hits = case when r.window_end <= p_now then 1 else r.hits + 1 end,
         window_start = case when r.window_end <= p_now then p_now else r.window_start end,
         window_end = case when r.window_end <= p_now then p_now + p_window_ms * interval '1 millisecond' else r.window_end end
   where r.window_end <= p_now or r.hits < p_limit
  returning r.window_end into v_end;
  if found then
    return query select true, 0::bigint;
    return;
  end if;
  select r.window_end into v_end from public.rate_limits r where r.key = p_key;
  return query select false, greatest(1, ceil(extract(epoch from (v_end - p_now)) * 1000))::bigint;
end
$$;

-- Gives back one hit of the current window (a sign-in attempt that turned out not to be a failure).
create function public.rate_limit_refund(p_key text, p_now timestamptz) returns void
language sql as $$
  update public.rate_limits set hits = hits - 1
   where key = p_key and hits > 0 and window_end > p_now
$$;

-- Removes every window that has ended; returns how many. For pg_cron or an operator (`select public.rate_limit_prune(now())`).
create function public.rate_limit_prune(p_now timestamptz) returns integer
language sql as $$
  with gone as (delete from public.rate_limits where window_end < p_now returning 1)
  select count(*)::integer from gone
$$;

revoke execute on function public.rate_limit_hit(text, integer, integer, timestamptz) from public, anon, authenticated;
revoke execute on function public.rate_limit_refund(text, timestamptz) from public, anon, authenticated;
revoke execute on function public.rate_limit_prune(timestamptz) from public, anon, authenticated;
