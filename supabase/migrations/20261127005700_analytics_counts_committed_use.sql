-- A reservation's commit is usage in the admin funnel, as an increment is (review 71).
--
-- contract.md: a commit "records amount as used (an increment with the reservation's ledger row)", and the funnel's
-- activated and used count purchases "with at least one usage increment". public.admin_analytics_funnel read only
-- ledger rows with event 'increment', so a subscriber of an agent that meters by hold and commit (the documented way
-- for work of unknown size) counted as never activated and never used, however much they used. Now a `committed` row
-- of more than 0 units counts too (a commit of 0 says the work used nothing; a hold, a release or an expiry counts
-- nothing, as the user's usage does not).
--
-- The funnel's backward probe stays index-only: the partial index takes the same rows (its predicate and the probe's
-- are the same expression, which is how the planner knows it may use it).

drop index public.quota_ledger_increments_idx;
create index quota_ledger_usage_idx on public.quota_ledger (subscription_id, created_at)
  where event = 'increment' or (event = 'committed' and amount > 0);

-- Restated from 20261127005400 with only the probe's event changed.
create or replace function public.admin_analytics_funnel(p_from timestamptz, p_to timestamptz, p_agent_id uuid)
returns table (agent_id uuid, purchased bigint, activated bigint, used bigint)
language sql stable parallel safe as $$
  select s.agent_id,
         count(*) as purchased,
         count(*) filter (where u.last_at is not null or i.user_id is not null) as activated,
         count(*) filter (where u.last_at >= greatest(p_from, p_to - interval '30 days')) as used
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
