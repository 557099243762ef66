-- Administration: indexes for the admin lists, and the analytics (funnel and weekly lifecycle trends) as SQL
-- functions, so the numbers are computed where the rows are and only a few aggregate rows cross the wire.
--
-- Analytics definitions (contract.md "Administration"; docs/admin.md explains them with examples):
--   * the window is [p_from, p_to], both ends inclusive;
--   * a subscription counts from its created_at; `incomplete` subscriptions (a first payment that never went
--     through) are left out everywhere: nothing was bought;
--   * purchased = created in the window;
--   * activated = of those, with a usage increment (quota_ledger event 'increment') or an install of the agent by
--     the subscriber, at or before p_to;
--   * used = of those, with a usage increment in the last 30 days of the window: [p_to - 30 days, p_to]
--     (clipped to the window when it is shorter than 30 days);
--   * weeks are ISO weeks (Monday 00:00 UTC); `active` at a week's end = live subscriptions created up to the end
--     of that week (or p_to, for the last one) minus those canceled by then.

-- A user's subscriptions newest first (GET /admin/subscriptions?userId=..., the user profile), and the status filter.
create index subscriptions_user_created_at_id_idx on public.subscriptions (user_id, created_at desc, id desc);
create index subscriptions_status_created_at_id_idx on public.subscriptions (status, created_at desc, id desc);
-- Cancellations per week, and the number canceled before a window starts.
create index subscriptions_canceled_at_idx on public.subscriptions (canceled_at) where canceled_at is not null;
create index subscriptions_agent_canceled_at_idx on public.subscriptions (agent_id, canceled_at) where canceled_at is not null;
-- "Has this subscription used the agent (by then / lately)?": the increments of one subscription by time.
-- Partial: denied increments, decrements and addon events are not usage.
create index quota_ledger_increments_idx on public.quota_ledger (subscription_id, created_at) where event = 'increment';
-- Subscriptions that count in analytics, by creation time (the window's purchases, and those before it),
-- covering what the funnel reads of them so a window is an index-only range scan.
create index subscriptions_counted_created_at_idx on public.subscriptions (created_at)
  include (id, agent_id, user_id) where status <> 'incomplete';
create index subscriptions_counted_agent_created_at_idx on public.subscriptions (agent_id, created_at)
  include (id, user_id) where status <> 'incomplete';

-- ---------------------------------------------------------------------------------------------------------
-- Funnel per agent for subscriptions created in [p_from, p_to] (p_agent_id null = every agent).
-- One index probe per subscription: its latest increment at or before p_to (a backward index-only scan of
-- quota_ledger_increments_idx) answers both questions, "any usage by then?" (activated) and "any in the last
-- 30 days?" (used). Installs are one hash join. Measured: 100k subscriptions and 1M ledger rows, see
-- scripts/bench/analytics.ts (a join of the window's subscriptions to all their increments was 4x slower).
-- ---------------------------------------------------------------------------------------------------------
create function public.admin_analytics_funnel(p_from timestamptz, p_to timestamptz, p_agent_id uuid)
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
  where s.created_at >= p_from and s.created_at <= p_to and s.status <> 'incomplete'
    and (p_agent_id is null or s.agent_id = p_agent_id)
  group by s.agent_id
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Weekly lifecycle trends over [p_from, p_to]: one row per ISO week (UTC) the window touches, its Monday as
-- `week`, with new subscriptions and cancellations inside the window, and `active` at the week's end.
-- `active` is a running total (live before the window + new - canceled so far), so each week costs two small
-- grouped counts instead of a scan per week.
-- ---------------------------------------------------------------------------------------------------------
create function public.admin_analytics_trends(p_from timestamptz, p_to timestamptz, p_agent_id uuid)
returns table (week date, new_subscriptions bigint, cancellations bigint, active bigint)
language sql stable parallel safe as $$
  with weeks as (
    select w as week_start
    from generate_series(date_trunc('week', p_from at time zone 'UTC'), date_trunc('week', p_to at time zone 'UTC'),
                         interval '1 week') w
  ), created as (
    select date_trunc('week', s.created_at at time zone 'UTC') as week_start, count(*) as n
    from public.subscriptions s
    where s.created_at >= p_from and s.created_at <= p_to and s.status <> 'incomplete'
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), canceled as (
    select date_trunc('week', s.canceled_at at time zone 'UTC') as week_start, count(*) as n
    from public.subscriptions s
    where s.canceled_at >= p_from and s.canceled_at <= p_to
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), before_window as (
    select (select count(*) from public.subscriptions s
             where s.created_at < p_from and s.status <> 'incomplete'
               and (p_agent_id is null or s.agent_id = p_agent_id))
         - (select count(*) from public.subscriptions s
             where s.canceled_at < p_from and (p_agent_id is null or s.agent_id = p_agent_id)) as n
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

-- For the service (and admins through it) only, not for PostgREST's roles.
revoke all on function public.admin_analytics_funnel(timestamptz, timestamptz, uuid) from public, anon, authenticated;
revoke all on function public.admin_analytics_trends(timestamptz, timestamptz, uuid) from public, anon, authenticated;
