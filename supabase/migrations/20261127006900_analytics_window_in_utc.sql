-- The admin funnel's "used" window is [to - 30 days, to] in UTC, whatever the session's TimeZone (review 98).
--
-- docs/admin.md says every boundary of the analytics is UTC, and the weekly trends and billing periods say
-- `at time zone 'UTC'` for that; the funnel's `p_to - interval '30 days'` did not. PostgreSQL adds and subtracts days
-- of a timestamptz in the session's TimeZone, so on a server whose TimeZone is not UTC (initdb takes the host's) a
-- window whose last 30 days cross a daylight-saving change moved by an hour: an increment 1 ms before to - 30 days
-- counted as used in Europe/Berlin. The window is now computed on UTC wall time. (The service also pins TimeZone=UTC on
-- its own connections, functions/platform/db.ts, so every other interval of its SQL is UTC too; this function holds on
-- any connection, a Data API one or an operator's psql.)

-- Restated from 20261127005700 with only the used window changed.
create or replace function public.admin_analytics_funnel(p_from timestamptz, p_to timestamptz, p_agent_id uuid)
returns table (agent_id uuid, purchased bigint, activated bigint, used bigint)
language sql stable parallel safe as $$
  select s.agent_id,
         count(*) as purchased,
         count(*) filter (where u.last_at is not null or i.user_id is not null) as activated,
         -- 30 days of UTC, whatever the session's TimeZone (changed in 20261127006900)
         count(*) filter (where u.last_at >= greatest(p_from, (p_to at time zone 'UTC' - interval '30 days') at time zone 'UTC')) as used
  from public.subscriptions s
  cross join lateral (
    -- the purchase's latest use at or before p_to, its restarts' included: one backward index probe for each
    select max(x.last_at) as last_at
    from (select s.id union all select m.id from public.subscriptions m where m.purchase_of = s.id) run (id)
    cross join lateral (
      select l.created_at as last_at
      from public.quota_ledger l
      where l.subscription_id = run.id and l.created_at <= p_to
        and (l.event = 'increment' or (l.event = 'committed' and l.amount > 0)) -- (changed in 20261127005700)
      order by l.created_at desc
      limit 1
    ) x
  ) u
  left join public.agent_installs i on i.agent_id = s.agent_id and i.user_id = s.user_id and i.created_at <= p_to
  where s.created_at >= p_from and s.created_at <= p_to and s.granted_access
    and s.purchase_of is null
    and (p_agent_id is null or s.agent_id = p_agent_id)
  group by s.agent_id
$$;
