-- A quota change takes the counters in the order the usage batches take them (found by review 46).
--
-- public.metering_lock_counters (a tier's quota lowered: every subscriber's counter of the metric; an addon revoked)
-- locked the counters in subscription-id order, and a usage batch locks them in the order of its calls: agent, user,
-- metric, period (20261126001100). Two subscribers of one tier whose ids sort the other way from their users' ids,
-- both in a batch while an admin lowered the tier's quota: each side held one counter and waited for the other,
-- until PostgreSQL ended one after deadlock_timeout (the admin's change answered 503, or the batch was sent again).
-- Now the change takes them by user, then period (one agent and one metric here, as in the batch), and only waits.
-- Body unchanged otherwise (20261126001600).
create or replace function public.metering_lock_counters(p_subscription_ids uuid[], p_metric_id uuid, p_now timestamptz)
returns void language plpgsql volatile as $$
begin
  -- transaction-local (is_local = true): it holds until this transaction ends, and for this transaction only
  perform set_config('idle_in_transaction_session_timeout', '5s', true);
  insert into public.usage_counters (subscription_id, metric_id, period_start, used, updated_at)
  select s.id, m.id, public.metering_counter_key(m.kind, b.period_start), 0, p_now
  from public.subscriptions s
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end,
                                           s.stripe_subscription_id is null, p_now) b
  join public.metric_definitions m on m.id = p_metric_id
  where s.id = any (p_subscription_ids)
  order by s.user_id, s.id
  on conflict do nothing;
  perform 1 from public.usage_counters c
  join public.subscriptions s on s.id = c.subscription_id
  where c.subscription_id = any (p_subscription_ids) and c.metric_id = p_metric_id
  order by s.user_id, c.period_start, c.subscription_id
  for update of c;
end
$$;
revoke execute on function public.metering_lock_counters(uuid[], uuid, timestamptz) from public, anon, authenticated;
