-- Metering's agent webhooks (contract.md revision 2, "Agent webhooks"): usage.threshold_reached and
-- reservation.expired, written from the quota ledger.
--
-- Every change that can raise a counter's `used + reserved` writes a ledger row carrying both, right after the
-- change, under the counter's row lock and on the change's transaction: `increment`, `reserved` and `committed`.
-- Every hold that expires writes an `expired` row (lazily: see 20261123000500_reservations.sql). So the ledger insert
-- is the one place these events start from, whichever function made the change, and an event exists exactly when
-- its cause committed: a denied call, a replay or a lost race writes no ledger row and emits nothing.
--
-- The trigger's WHEN clause keeps the hot path lean: below 80 % of a positive limit the trigger function is not
-- even called. public.metering_note_threshold (20261123000600_agent_webhooks.sql) records each threshold once per
-- (subscription, metric, counter, threshold), emits the event and queues the user's 100 % mail.

create function public.metering_ledger_webhooks() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if new.event = 'expired' then
    perform public.webhook_emit(
      s.agent_id, 'reservation.expired',
      jsonb_build_object(
        'id', r.id,
        'subscriptionId', r.subscription_id,
        'userId', s.user_id,
        'metric', m.slug,
        'status', 'expired',
        'amount', r.amount,
        'clientReqId', r.client_req_id,
        'expiresAt', public.webhook_iso(r.expires_at),
        'createdAt', public.webhook_iso(r.created_at)),
      new.created_at)
    from public.usage_reservations r
    join public.subscriptions s on s.id = r.subscription_id
    join public.metric_definitions m on m.id = r.metric_id
    where r.id = (new.details ->> 'reservationId')::uuid;
  else
    -- the counter's key: the period start for a rolling metric, '-infinity' for a fixed one (its ledger rows show
    -- the subscription's start)
    perform public.metering_note_threshold(
      new.subscription_id, new.metric_id,
      case when m.kind = 'rolling' then new.period_start else '-infinity'::timestamptz end,
      new.used + coalesce(new.reserved, 0), new.quota_limit, new.created_at)
    from public.metric_definitions m
    where m.id = new.metric_id;
  end if;
  return null;
end
$$;

create trigger quota_ledger_threshold_reached after insert on public.quota_ledger
  for each row
  when (new.event in ('increment', 'reserved', 'committed') and new.quota_limit > 0
        and (new.used + coalesce(new.reserved, 0))::numeric * 100 >= new.quota_limit::numeric * 80)
  execute function public.metering_ledger_webhooks();

create trigger quota_ledger_reservation_expired after insert on public.quota_ledger
  for each row
  when (new.event = 'expired')
  execute function public.metering_ledger_webhooks();

revoke execute on function public.metering_ledger_webhooks() from public, anon, authenticated;
