-- public.billing_period becomes a set-returning SQL function (exactly one row), so the planner inlines its body
-- into the statement that calls it (issue 16, the lean statement path).
--
-- Why: as a record-returning function (OUT parameters, not SETOF) it could not be inlined, and PostgreSQL 15 plans
-- a non-inlined SQL function's body again on every call of its statement. Inside metering_increment and
-- metering_reserve (`select ... into v_start, v_end from public.billing_period(...)`) that statement cost 75-90 us
-- of a 224 us increment, more than the counter and the ledger writes together; inlined it costs about 10 us
-- (measured in a loop of 5,000 calls in one transaction on this machine; docs/internals/metering.md). Same
-- arguments, same columns, same rule: every caller already reads it in FROM (`from`, `cross join lateral`) except
-- two service queries, which now read it through scalar subqueries.
drop function public.billing_period(timestamptz, timestamptz, boolean, timestamptz);

-- Billing period of a subscription at a given time (rule unchanged, see 20261122000500_metering.sql).
create function public.billing_period(
  p_anchor timestamptz,
  p_stored_end timestamptz,
  p_computed boolean,
  p_now timestamptz
) returns table (period_start timestamptz, period_end timestamptz)
language sql immutable parallel safe rows 1 as $$
  select
    case when p_computed then (a + make_interval(months => n)) at time zone 'UTC' else p_anchor end,
    case when p_computed then (a + make_interval(months => n + 1)) at time zone 'UTC' else p_stored_end end
  from (
    select a, greatest(0, m - case when a + make_interval(months => m) > t then 1 else 0 end) as n
    from (
      select a, t,
             ((extract(year from t) - extract(year from a)) * 12 + extract(month from t) - extract(month from a))::int as m
      from (select p_anchor at time zone 'UTC' as a, p_now at time zone 'UTC' as t) x
    ) y
  ) z
$$;
