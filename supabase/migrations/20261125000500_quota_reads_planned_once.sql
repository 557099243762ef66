-- The three small SQL functions that every usage write calls become PL/pgSQL, same arguments, same result, same
-- rule (issue 16, the lean statement path).
--
-- Why: PostgreSQL 15 cannot inline a scalar SQL function whose body reads a table, and it keeps such a function's
-- parsed and planned body only as long as the expression that calls it. A PL/pgSQL assignment
-- (`v_limit := public.metering_effective_limit(...)`) evaluates in a per-transaction expression state, and a
-- statement's expressions are rebuilt on every execution, so every transaction parsed, analysed and planned these
-- bodies again: in the HTTP spread benchmark (perf, 2026-11-25) `fmgr_sql` was 17.7% of the database's CPU, most of
-- it `pg_plan_query`. A PL/pgSQL function keeps its statements' plans for the session; what it costs per call
-- instead is a few microseconds of interpreter. In a transaction of 7 increments that is 160 us less (23 us per
-- increment), and a lone increment (one call, one transaction) is 150 us faster.
--
-- create or replace keeps each function's owner and privileges; metering_counter_for_update stays revoked from
-- public, anon and authenticated (20261125000400).

create or replace function public.metering_effective_limit(
  p_subscription_id uuid, p_tier_id uuid, p_metric_id uuid, p_period_start timestamptz
) returns bigint language plpgsql stable as $$
begin
  -- the tier's quota (none: 0; a null quota: unlimited) plus the live addons of this counter's period
  return (
    select case
      when q.tier_id is not null and q.quota_limit is null then null
      else coalesce(q.quota_limit, 0) + coalesce((
        select sum(a.amount) from public.usage_addons a
        where a.subscription_id = p_subscription_id and a.metric_id = p_metric_id and a.revoked_at is null
          and (a.duration = 'permanent' or a.period_start = p_period_start)), 0)::bigint
    end
    from (select 1) one
    left join public.tier_quotas q on q.tier_id = p_tier_id and q.metric_id = p_metric_id);
end
$$;

create or replace function public.metering_live_holds(
  p_subscription_id uuid, p_metric_id uuid, p_counter_key timestamptz, p_now timestamptz
) returns bigint language plpgsql stable as $$
begin
  return (
    select coalesce(sum(r.amount), 0)::bigint
    from public.usage_reservations r
    where r.subscription_id = p_subscription_id and r.metric_id = p_metric_id and r.counter_key = p_counter_key
      and r.status = 'held' and r.expires_at > p_now);
end
$$;

create or replace function public.metering_counter_for_update(
  p_subscription_id uuid, p_metric_id uuid, p_counter_key timestamptz, p_now timestamptz
) returns bigint language plpgsql volatile as $$
declare
  v_used bigint;
begin
  -- the counter's row lock (created at 0 when missing), and its value
  insert into public.usage_counters as c (subscription_id, metric_id, period_start, used, updated_at)
  values (p_subscription_id, p_metric_id, p_counter_key, 0, p_now)
  on conflict (subscription_id, metric_id, period_start) do update set used = c.used
  returning c.used into v_used;
  return v_used;
end
$$;
