-- Ledger rows for events that are not usage calls (addon grants and revokes, tier quota changes), one per
-- affected subscription, each carrying the counter and the effective quota right after the event, so an
-- admin reading a subscription's ledger sees why its limit moved. A tier quota change is written once per
-- live subscription on that tier (set-based, in the same transaction as the change).
create function public.metering_record_events(
  p_subscription_ids uuid[], p_metric_id uuid, p_event text, p_amount bigint, p_addon_id uuid,
  p_actor_user_id text, p_details jsonb, p_now timestamptz
) returns integer language sql volatile as $$
  with written as (
    insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, quota_limit,
                                     period_start, period_end, addon_id, actor_user_id, details, created_at)
    select public.quota_ledger_id(p_now), s.id, m.id, p_event, p_amount, 0, coalesce(c.used, 0),
           public.metering_effective_limit(s.id, s.tier_id, m.id, k.counter_key),
           case when m.kind = 'rolling' then b.period_start else s.created_at end,
           case when m.kind = 'rolling' then b.period_end end,
           p_addon_id, p_actor_user_id, coalesce(p_details, '{}'::jsonb), p_now
    from public.subscriptions s
    cross join lateral public.billing_period(s.current_period_start, s.current_period_end,
                                             s.stripe_subscription_id is null, p_now) b
    join public.metric_definitions m on m.id = p_metric_id
    cross join lateral (select public.metering_counter_key(m.kind, b.period_start) as counter_key) k
    left join public.usage_counters c
      on c.subscription_id = s.id and c.metric_id = m.id and c.period_start = k.counter_key
    where s.id = any (p_subscription_ids)
    order by s.id
    returning 1
  )
  select count(*)::int from written
$$;
