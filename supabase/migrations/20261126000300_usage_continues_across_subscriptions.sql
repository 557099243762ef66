-- A user's usage of an agent continues across their subscriptions to it.
--
-- Counters belong to a subscription, and a free subscription ends at once when canceled (contract: cancel, free:
-- now). So a user who had used up a free tier could cancel it and start it again (POST /me/subscriptions/{agentId}/
-- cancel, then POST /me/checkout) and get fresh counters, as often as they liked: every free quota was unlimited, and
-- "fixed metrics never reset" held only until the next restart. Found by a hostile review. Now, when a subscription
-- is started for a user and agent that had one before (at most one is ever live, so the earlier ones are canceled):
--   * a free subscription after a free one keeps that one's monthly cycle (its anchor, current_period_start), so the
--     period it is in is the one the earlier subscription was in;
--   * the fixed counters of the latest earlier subscription are carried into the new one (fixed metrics never reset);
--   * and, for a free subscription after a free one, its rolling counters of the period the new one starts in.
-- A paid subscription's rolling metrics start with its own (paid) period, and a free one after a paid one starts a
-- cycle of its own: the user paid for that usage. Each carried counter gets a `carried_over` ledger row (delta = the
-- amount carried, details.fromSubscriptionId), so every counter still equals the sum of its ledger. Holds are not
-- carried: a canceled subscription's holds can no longer be committed and expire by themselves.
-- One call in flight at the moment of the cancel can still count on the canceled subscription after its counters
-- were copied: at most one call per counter, and only then.

alter table public.quota_ledger drop constraint quota_ledger_event_check;
alter table public.quota_ledger add constraint quota_ledger_event_check check (event in (
  'increment', 'increment_denied', 'decrement', 'addon_granted', 'addon_revoked', 'quota_changed',
  'reserved', 'reserve_denied', 'committed', 'released', 'expired', 'carried_over'));

-- The latest earlier subscription of the new one's user and agent (none: no row).
create function public.subscription_predecessor(p_user_id text, p_agent_id uuid, p_subscription_id uuid)
returns table (id uuid, anchor timestamptz, free_cycle boolean)
language sql stable as $$
  select s.id, s.current_period_start, s.stripe_subscription_id is null
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and s.id <> p_subscription_id and s.status = 'canceled'
  order by s.created_at desc, s.id desc
  limit 1
$$;

create function public.subscription_continue_cycle() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_prev record;
begin
  if new.stripe_subscription_id is not null then
    return new;
  end if;
  select * into v_prev from public.subscription_predecessor(new.user_id, new.agent_id, new.id);
  if found and v_prev.free_cycle then
    new.current_period_start := v_prev.anchor;
    new.current_period_end := (select b.period_end from public.billing_period(v_prev.anchor, null, true, new.created_at) b);
  end if;
  return new;
end
$$;

create function public.subscription_continue_usage() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_prev record;
  v_rolling_start timestamptz;
  v_rolling_end timestamptz;
begin
  select * into v_prev from public.subscription_predecessor(new.user_id, new.agent_id, new.id);
  if not found then
    return null;
  end if;
  if new.stripe_subscription_id is null and v_prev.free_cycle then
    select b.period_start, b.period_end into v_rolling_start, v_rolling_end
    from public.billing_period(new.current_period_start, null, true, new.created_at) b;
  end if;

  with carried as (
    insert into public.usage_counters (subscription_id, metric_id, period_start, used, updated_at)
    select new.id, c.metric_id, c.period_start, c.used, new.created_at
    from public.usage_counters c
    join public.metric_definitions m on m.id = c.metric_id
    where c.subscription_id = v_prev.id and c.used > 0
      and ((m.kind = 'fixed' and c.period_start = '-infinity')
           or (m.kind = 'rolling' and c.period_start = v_rolling_start))
    returning metric_id, period_start, used
  )
  insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                   period_start, period_end, details, created_at)
  select public.quota_ledger_id(new.created_at), new.id, k.metric_id, 'carried_over', k.used, k.used, k.used, 0,
         public.metering_effective_limit(new.id, new.tier_id, k.metric_id, k.period_start),
         case when k.period_start = '-infinity' then new.created_at else v_rolling_start end,
         case when k.period_start = '-infinity' then null else v_rolling_end end,
         jsonb_build_object('fromSubscriptionId', v_prev.id), new.created_at
  from carried k
  order by k.metric_id;
  return null;
end
$$;

create trigger subscriptions_continue_cycle before insert on public.subscriptions
  for each row execute function public.subscription_continue_cycle();
create trigger subscriptions_continue_usage after insert on public.subscriptions
  for each row execute function public.subscription_continue_usage();

revoke execute on function public.subscription_predecessor(text, uuid, uuid) from public, anon, authenticated;
revoke execute on function public.subscription_continue_cycle() from public, anon, authenticated;
revoke execute on function public.subscription_continue_usage() from public, anon, authenticated;
