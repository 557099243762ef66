-- A free plan canceled and started again in the same month is one purchase, not two (review 61).
--
-- A user who cancels a free subscription and starts it again continues it (20261126000300: same monthly cycle, the
-- counters go on, subscriptions.continued_from names the one it continues). Analytics counted each restart as a new
-- purchase and each cancel before it as churn: any account, with its cookie only, added up to 50 purchases and 50
-- cancellations a day (its checkout allowance) to any agent with a free tier, and the agent's conversion rates fell
-- with them (only the first subscription of the run had the usage). It is the harm 20261127000300 removed for unpaid
-- checkouts, by another path.
--
-- A restart: a free subscription continuing a free one that was bought, started in the billing period (of their
-- shared cycle) in which that one was canceled, so its counters go on where they were. It is no purchase (funnel,
-- newSubscriptions), the cancel it followed is no churn (cancellations), and its usage and install count for the
-- purchase it continues (activated, used). Not a restart, and counted as before: anything paid when it started
-- (money changed hands), and a free plan taken again in a later month (the user came back). A cancel counts as churn
-- until its restart comes (within the month): a window read in between shows it, the same window read after does not.
--
-- Decided once, when the subscription is found to continue another (the trigger below, on the write that sets
-- continued_from), and stored, so the analytics stay index-only counts whatever the history: a per-row function asked
-- at read time cost every analytics call about 0.5 ms per restart ever made and a probe per subscription ever
-- created (review 62). A free restart later converted to paid in place stays a restart: converting without a restart
-- counts once too.
--   subscriptions.purchase_of: for a restart, the purchase it continues (the first subscription of the run); null for
--     a purchase of its own.
--   subscriptions.restarted: a restart continued it, so its cancel was no churn.
-- The analytics functions (from 20261127000300) are restated whole; changes are marked "(changed in 20261127005400)".

alter table public.subscriptions add column purchase_of uuid references public.subscriptions (id) on delete set null;
alter table public.subscriptions add column restarted boolean not null default false;
create index subscriptions_purchase_of_idx on public.subscriptions (purchase_of) where purchase_of is not null;

-- Whether `p_next`, found to continue `p_prev`, is a restart as above: the one definition (the trigger and the
-- backfill below ask it).
create function public.subscription_is_restart(p_next public.subscriptions, p_prev public.subscriptions) returns boolean
language sql stable as $$
  select p_next.stripe_subscription_id is null and p_prev.stripe_subscription_id is null
     and p_prev.granted_access and p_prev.canceled_at is not null
     and (select b.period_start from public.billing_period(p_next.current_period_start, null, true, p_next.created_at) b)
       = (select b.period_start from public.billing_period(p_next.current_period_start, null, true, p_prev.canceled_at) b)
$$;
revoke execute on function public.subscription_is_restart(public.subscriptions, public.subscriptions) from public, anon, authenticated;

create function public.subscription_note_restart() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_prev public.subscriptions;
begin
  select * into v_prev from public.subscriptions where id = new.continued_from;
  if found and public.subscription_is_restart(new, v_prev) then
    new.purchase_of := coalesce(v_prev.purchase_of, v_prev.id);
    update public.subscriptions set restarted = true where id = v_prev.id and not restarted;
  end if;
  return new;
end
$$;
revoke execute on function public.subscription_note_restart() from public, anon, authenticated;

-- continued_from is written by subscription_continue_usage (after the insert, or the update that first grants access)
-- once per subscription; this runs on that write. No other trigger watches these two columns.
create trigger subscriptions_note_restart before update of continued_from on public.subscriptions
  for each row when (new.continued_from is not null and new.continued_from is distinct from old.continued_from)
  execute function public.subscription_note_restart();

-- What is already there, oldest first (a run's purchase is written before its restarts read it).
do $$
declare
  v_next public.subscriptions;
  v_prev public.subscriptions;
begin
  for v_next in select * from public.subscriptions where continued_from is not null order by created_at, id loop
    select * into v_prev from public.subscriptions where id = v_next.continued_from;
    if found and public.subscription_is_restart(v_next, v_prev) then
      update public.subscriptions set purchase_of = coalesce(v_prev.purchase_of, v_prev.id) where id = v_next.id;
      update public.subscriptions set restarted = true where id = v_prev.id;
    end if;
  end loop;
end
$$;

-- The counted rows' indexes (20261127000300), now of purchases and of cancels that were churn: index-only counts again.
drop index public.subscriptions_counted_created_at_idx;
drop index public.subscriptions_counted_agent_created_at_idx;
drop index public.subscriptions_canceled_at_idx;
drop index public.subscriptions_agent_canceled_at_idx;
create index subscriptions_counted_created_at_idx on public.subscriptions (created_at)
  include (id, agent_id, user_id) where granted_access and purchase_of is null;
create index subscriptions_counted_agent_created_at_idx on public.subscriptions (agent_id, created_at)
  include (id, user_id) where granted_access and purchase_of is null;
create index subscriptions_canceled_at_idx on public.subscriptions (canceled_at)
  where canceled_at is not null and granted_access and not restarted;
create index subscriptions_agent_canceled_at_idx on public.subscriptions (agent_id, canceled_at)
  where canceled_at is not null and granted_access and not restarted;

create or replace function public.admin_analytics_funnel(p_from timestamptz, p_to timestamptz, p_agent_id uuid)
returns table (agent_id uuid, purchased bigint, activated bigint, used bigint)
language sql stable parallel safe as $$
  select s.agent_id,
         count(*) as purchased,
         count(*) filter (where u.last_at is not null or i.user_id is not null) as activated,
         count(*) filter (where u.last_at >= greatest(p_from, p_to - interval '30 days')) as used
  from public.subscriptions s
  cross join lateral (
    -- the purchase's latest increment at or before p_to, its restarts' included: one backward index probe for each
    -- (changed in 20261127005400)
    select max(x.last_at) as last_at
    from (select s.id union all select m.id from public.subscriptions m where m.purchase_of = s.id) run (id)
    cross join lateral (
      select l.created_at as last_at
      from public.quota_ledger l
      where l.subscription_id = run.id and l.event = 'increment' and l.created_at <= p_to
      order by l.created_at desc
      limit 1
    ) x
  ) u
  left join public.agent_installs i on i.agent_id = s.agent_id and i.user_id = s.user_id and i.created_at <= p_to
  where s.created_at >= p_from and s.created_at <= p_to and s.granted_access
    and s.purchase_of is null -- (changed in 20261127005400)
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
      and s.purchase_of is null -- (changed in 20261127005400)
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), canceled as (
    select date_trunc('week', s.canceled_at at time zone 'UTC') as week_start, count(*) as n
    from public.subscriptions s
    where s.canceled_at >= p_from and s.canceled_at <= p_to and s.granted_access
      and not s.restarted -- (changed in 20261127005400)
      and (p_agent_id is null or s.agent_id = p_agent_id)
    group by 1
  ), before_window as (
    select (select count(*) from public.subscriptions s
             where s.created_at < p_from and s.granted_access
               and s.purchase_of is null -- (changed in 20261127005400)
               and (p_agent_id is null or s.agent_id = p_agent_id))
         - (select count(*) from public.subscriptions s
             where s.canceled_at < p_from and s.granted_access
               and not s.restarted -- (changed in 20261127005400)
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
