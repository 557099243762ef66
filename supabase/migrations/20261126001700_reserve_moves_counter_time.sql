-- A reserve moves its counter's time forward too (found by a review). A commit judges its hold's expiry at the
-- counter's latest time (usage_counters.updated_at, 20261126000400 and 0900), which increments, commits and releases
-- move; a reserve did not, and relied on settling the expired holds of its counter itself, which it does for at most
-- 100 of them (20261126000600). So with more than 100 holds expiring together, a reserve just after the expiry took
-- their units, and commits of the holds it left unsettled that arrived just before the expiry but ran after the
-- reserve still found them live and counted them: both past the limit (50 over on a quota of 150).
--
-- The counter's row is locked, and now timed, by the function every locking path uses; the trigger of 0900 keeps the
-- time from going back (an earlier call run later leaves it as it is). Body unchanged otherwise
-- (20261125000500_quota_reads_planned_once.sql).
create or replace function public.metering_counter_for_update(
  p_subscription_id uuid, p_metric_id uuid, p_counter_key timestamptz, p_now timestamptz
) returns bigint language plpgsql volatile as $$
declare
  v_used bigint;
begin
  -- the counter's row lock (created at 0 when missing), its value, and its time moved to this call's
  insert into public.usage_counters as c (subscription_id, metric_id, period_start, used, updated_at)
  values (p_subscription_id, p_metric_id, p_counter_key, 0, p_now)
  on conflict (subscription_id, metric_id, period_start) do update set used = c.used, updated_at = excluded.updated_at
  returning c.used into v_used;
  return v_used;
end
$$;
revoke execute on function public.metering_counter_for_update(uuid, uuid, timestamptz, timestamptz) from public, anon, authenticated;
