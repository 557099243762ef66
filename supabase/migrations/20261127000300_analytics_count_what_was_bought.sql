-- Analytics count what was bought: a subscription counts (purchases, new subscriptions, cancellations, live ones) when
-- it ever granted access, not when its status is anything but 'incomplete' (found by a hostile review of the admin
-- room, review 02).
--
-- A checkout whose first payment never comes is 'incomplete' for 23 hours; then Stripe ends it (incomplete_expired),
-- which the marketplace records as 'canceled' (functions/billing/subscription-state.ts). From then on the same
-- never-paid subscription counted as a purchase in the funnel and as a new subscription and a cancellation in the
-- trends: a window's numbers changed a day later, and any user could add purchases and churn to any agent's
-- analytics by leaving checkouts unpaid (3-D Secure left unanswered). subscriptions.granted_access (20261126000500:
-- set once the subscription grants access, never unset) is the rule "something was bought": a never-paid one has it
-- false whatever Stripe does with it later; a pending one that is paid gets it then, and counts from its created_at
-- as before. The functions (from 20261122000700_admin.sql) are restated whole with only the predicate changed
-- (marked "(changed in 20261127000300)"); the partial indexes follow it.

drop index public.subscriptions_counted_created_at_idx;
drop index public.subscriptions_counted_agent_created_at_idx;
drop index public.subscriptions_canceled_at_idx;
drop index public.subscriptions_agent_canceled_at_idx;
create index subscriptions_counted_created_at_idx on public.subscriptions (created_at)
  include (id, agent_id, user_id) where granted_access;
create index subscriptions_counted_agent_created_at_idx on public.subscriptions (agent_id, created_at)
  include (id, user_id) where granted_access;
create index subscriptions_canceled_at_idx on public.subscriptions (canceled_at) where canceled_at is not null and granted_access;
create index subscriptions_agent_canceled_at_idx on public.subscriptions (agent_id, canceled_at)
  where canceled_at is not null and granted_access;

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
    from public.quota_ledger l
    where l.subscription_id = s.id and l.event = 'increment' and l.created_at <= p_to
  ) u
  left join public.agent_installs i on i.agent_id = s.agent_id and i.user_id = s.user_id and i.created_at <= p_to
  where s.created_at >= p_from and s.created_at <= p_to and s.granted_access -- (changed in 20261127000300)
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
    where s.created_at >= p_from and s.created_at <= p_to and s.granted_access -- (changed in 20261127000300)
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), canceled as (
    select date_trunc('week', s.canceled_at at time zone 'UTC') as week_start, count(*) as n
    from public.subscriptions s
    where s.canceled_at >= p_from and s.canceled_at <= p_to and s.granted_access -- (changed in 20261127000300)
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), before_window as (
    select (select count(*) from public.subscriptions s
             where s.created_at < p_from and s.granted_access -- (changed in 20261127000300)
               and (p_agent_id is null or s.agent_id = p_agent_id))
         - (select count(*) from public.subscriptions s
             where s.canceled_at < p_from and s.granted_access -- (changed in 20261127000300)
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
