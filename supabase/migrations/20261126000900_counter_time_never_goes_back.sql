-- A counter's time (usage_counters.updated_at) never goes back: it is the latest time any call has written the
-- counter at (found by a hostile review).
--
-- Migration 20261126000400 judges a commit's expiry at the later of its own time and the counter's updated_at, so a
-- hold that a later write already treated as expired cannot be counted too. But every writer set updated_at to its
-- own time, also a call that ran after a later one (the group commit orders a batch by counter and clientReqId, not by
-- time; instances' clocks differ): an increment at T+1 ms took the units of hold R (expired at T), a denied increment
-- that arrived at T-2 ms ran next and set updated_at back to T-2 ms, and R's commit from T-1 ms then found R live and
-- counted it as well: 20 used on a quota of 10. One rule for every writer (increment, decrement, commit, release, the
-- restart's carry, a lock taken for a quota change): an update never moves updated_at back. The WHEN clause keeps the
-- usual case (time moving forward) free of any function call.

create function public.usage_counter_time_never_goes_back() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  new.updated_at := old.updated_at;
  return new;
end
$$;

create trigger usage_counters_time_never_goes_back before update of updated_at on public.usage_counters
  for each row when (new.updated_at < old.updated_at) execute function public.usage_counter_time_never_goes_back();

revoke execute on function public.usage_counter_time_never_goes_back() from public, anon, authenticated;
