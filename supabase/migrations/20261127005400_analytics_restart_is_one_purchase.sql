-- A free plan canceled and started again in the same month is one purchase, not two (review 61).
--
-- A user who cancels a free subscription and starts it again continues it (20261126000300: same monthly cycle, the
-- counters go on, subscriptions.continued_from names the one it continues). Analytics counted each restart as a new
-- purchase and each cancel before it as churn: any account, with its cookie only, added up to 50 purchases and 50
-- cancellations a day (its checkout allowance) to any agent with a free tier, and the agent's conversion rates fell
-- with them (only the first subscription of the run had the usage). It is the harm 20261127000300 removed for unpaid
-- checkouts, by another path.
--
-- A restart: a free subscription continuing a free one, started in the billing period (of their shared cycle) in
-- which that one was canceled, so its counters go on where they were. It is no purchase (funnel, newSubscriptions),
-- the cancel it followed is no churn (cancellations), and its usage and install count for the purchase it continues
-- (activated, used). Not a restart, and counted as before: anything paid (money changed hands), and a free plan
-- taken again in a later month (the user came back; its counters started from zero). A cancel counts as churn until
-- its restart comes (within the month): a window read in between shows it, the same window read after does not.
-- The functions (from 20261127000300) are restated whole; changes are marked "(changed in 20261127005400)".

create index subscriptions_continued_from_idx on public.subscriptions (continued_from) where continued_from is not null;

-- Whether a subscription is a restart, as above: the one definition the analytics use.
create function public.subscription_is_restart(p_subscription_id uuid)
returns boolean
language sql stable parallel safe
set search_path = public, pg_temp
as $$
  select exists (
    select 1
    from public.subscriptions n
    join public.subscriptions p on p.id = n.continued_from
    cross join lateral public.billing_period(n.current_period_start, null, true, n.created_at) started
    cross join lateral public.billing_period(n.current_period_start, null, true, p.canceled_at) ended
    where n.id = p_subscription_id
      and n.stripe_subscription_id is null and p.stripe_subscription_id is null
      and p.granted_access and p.canceled_at is not null
      and started.period_start = ended.period_start
  )
$$;

-- Whether a subscription was followed by a restart that was bought (its cancel then was no churn).
create function public.subscription_restarted(p_subscription_id uuid)
returns boolean
language sql stable parallel safe
set search_path = public, pg_temp
as $$
  select exists (
    select 1 from public.subscriptions n
    where n.continued_from = p_subscription_id and n.granted_access and public.subscription_is_restart(n.id)
  )
$$;

-- A purchase and the restarts that continued it, the purchase first (its usage is theirs together).
create function public.subscription_with_restarts(p_subscription_id uuid)
returns table (subscription_id uuid)
language sql stable parallel safe
set search_path = public, pg_temp
as $$
  with recursive run (id) as (
    select p_subscription_id
    union
    select n.id from run r join public.subscriptions n on n.continued_from = r.id
     where n.granted_access and public.subscription_is_restart(n.id)
  )
  select id from run
$$;

revoke execute on function public.subscription_is_restart(uuid) from public, anon, authenticated;
revoke execute on function public.subscription_restarted(uuid) from public, anon, authenticated;
revoke execute on function public.subscription_with_restarts(uuid) from public, anon, authenticated;

create or replace function public.admin_analytics_funnel(p_from timestamptz, p_to timestamptz, p_agent_id uuid)
returns table (agent_id uuid, purchased bigint, activated bigint, used bigint)
language sql stable parallel safe as $$
  select s.agent_id,
         count(*) as purchased,
         count(*) filter (where u.last_at is not null or i.user_id is not null) as activated,
         count(*) filter (where u.last_at >= greatest(p_from, p_to - interval '30 days')) as used
  from public.subscriptions s
  cross join lateral (
    select max(l.created_at) as last_at
    from public.subscription_with_restarts(s.id) r -- (changed in 20261127005400)
    join public.quota_ledger l on l.subscription_id = r.subscription_id -- (changed in 20261127005400)
    where l.event = 'increment' and l.created_at <= p_to
  ) u
  left join public.agent_installs i on i.agent_id = s.agent_id and i.user_id = s.user_id and i.created_at <= p_to
  where s.created_at >= p_from and s.created_at <= p_to and s.granted_access
    and not public.subscription_is_restart(s.id) -- (changed in 20261127005400)
    and (p_agent_id is null or s.agent_id = p_agent_id)
  group by s.agent_id
$$;

create or replace function public.admin_analytics_trends(p_from timestamptz, p_to timestamptz, p_agent_id uuid)
returns table (week date, new_subscriptions bigint, cancellations bigint, active bigint)
language sql stable parallel safe as $$
  with weeks as (
    select w as week_start
    from generate_series(date_trunc('week', p_from at time zone 'UTC'), date_trunc('week', p_to at time zone 'UTC'),
                         interval '1 week') w
  ), created as (
    select date_trunc('week', s.created_at at time zone 'UTC') as week_start, count(*) as n
    from public.subscriptions s
    where s.created_at >= p_from and s.created_at <= p_to and s.granted_access
      and not public.subscription_is_restart(s.id) -- (changed in 20261127005400)
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), canceled as (
    select date_trunc('week', s.canceled_at at time zone 'UTC') as week_start, count(*) as n
    from public.subscriptions s
    where s.canceled_at >= p_from and s.canceled_at <= p_to and s.granted_access
      and not public.subscription_restarted(s.id) -- (changed in 20261127005400)
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), before_window as (
    select (select count(*) from public.subscriptions s
             where s.created_at < p_from and s.granted_access
               and not public.subscription_is_restart(s.id) -- (changed in 20261127005400)
               and (p_agent_id is null or s.agent_id = p_agent_id))
         - (select count(*) from public.subscriptions s
             where s.canceled_at < p_from and s.granted_access
               and not public.subscription_restarted(s.id) -- (changed in 20261127005400)
               and (p_agent_id is null or s.agent_id = p_agent_id)) as n
  )
  select w.week_start::date as week,
         coalesce(c.n, 0) as new_subscriptions,
         coalesce(x.n, 0) as cancellations,
         (bw.n + sum(coalesce(c.n, 0) - coalesce(x.n, 0)) over (order by w.week_start))::bigint as active
  from weeks w
  cross join before_window bw
  left join created c on c.week_start = w.week_start
  left join canceled x on x.week_start = w.week_start
  order by w.week_start
$$;
