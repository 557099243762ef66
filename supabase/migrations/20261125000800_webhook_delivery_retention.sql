-- Agent-webhook history is kept 30 days, not for ever. Until now every event and every delivery (with each attempt's
-- status and error) stayed in public.webhook_events, webhook_deliveries and webhook_delivery_attempts for good: the
-- tables only grew, by one event per subscription change or threshold, and one delivery per endpoint, and an event's
-- data names the user (userId) and what they bought. The decision: the history an agent seller reads
-- (listWebhookDeliveries) and can act on (redeliverWebhook) covers the last 30 days, as Stripe keeps its own event
-- history for 30 days. By then a delivery has long been settled: retries end after about 24 hours.
--
-- The housekeeping (20261123000700; every minute under pg_cron, or every POST /internal/drain) now also deletes:
--   - deliveries done (delivered or failed) more than 30 days ago, with their attempts (on delete cascade). A pending
--     delivery is never touched, and a redelivered one is pending again until its new round ends;
--   - events more than 30 days old that no delivery refers to any more (their deliveries were pruned, or their
--     endpoint was deleted).
-- Bounded like the rest: at most 1,000 of each per run, oldest first; the next run takes the rest. The two indexes
-- keep each run to the rows it deletes (a drain may run every few seconds).
--
-- Each table's pruning is its own function, as rate_limit_prune and metering_expire_reservations already were, so
-- the housekeeping is a list of calls and the next retention adds one line to it. The mail retention of
-- 20261125000600 moves into public.mail_outbox_prune unchanged.
create index webhook_deliveries_done_idx on public.webhook_deliveries ((coalesce(delivered_at, last_attempt_at, created_at)))
  where status <> 'pending';
create index webhook_events_occurred_idx on public.webhook_events (occurred_at);

-- Mails done (sent, logged or failed for good) more than 7 days ago: they carry links with tokens (20261125000600).
create function public.mail_outbox_prune(p_now timestamptz, p_limit integer) returns integer
language sql volatile
set search_path = public, pg_temp
as $$
  with done as (
    select id from public.mail_outbox
     where status <> 'pending' and coalesce(sent_at, next_attempt_at, created_at) < p_now - interval '7 days'
     order by coalesce(sent_at, next_attempt_at, created_at)
     limit p_limit
  ), gone as (delete from public.mail_outbox m using done where m.id = done.id returning 1)
  select count(*)::integer from gone
$$;

-- Agent-webhook deliveries done more than 30 days ago (their attempts go with them), then events that old that no
-- delivery refers to any more.
create function public.webhook_history_prune(p_now timestamptz, p_limit integer)
returns table (deliveries integer, events integer)
language plpgsql volatile
set search_path = public, pg_temp
as $$
begin
  with done as (
    select id from public.webhook_deliveries
     where status <> 'pending' and coalesce(delivered_at, last_attempt_at, created_at) < p_now - interval '30 days'
     order by coalesce(delivered_at, last_attempt_at, created_at)
     limit p_limit
  ), gone as (
    -- status again here: the row is re-checked when it is deleted, so a delivery an admin redelivered (pending
    -- again) after it was picked above stays
    delete from public.webhook_deliveries d using done where d.id = done.id and d.status <> 'pending' returning 1)
  select count(*)::integer into deliveries from gone;
  with old as (
    select e.id from public.webhook_events e
     where e.occurred_at < p_now - interval '30 days'
       and not exists (select 1 from public.webhook_deliveries d where d.event_id = e.id)
     order by e.occurred_at
     limit p_limit
  ), gone as (delete from public.webhook_events e using old where e.id = old.id returning 1)
  select count(*)::integer into events from gone;
  return next;
end
$$;

create or replace function public.background_housekeeping(p_now timestamptz)
returns jsonb
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_revoked integer;
  v_rate_limits integer;
  v_reservations integer;
  v_mail integer;
  v_webhooks record;
begin
  -- A revocation-list row only matters until the last access token it covers has expired.
  with gone as (delete from public.revoked_tokens where expires_at < p_now returning 1)
  select count(*)::integer into v_revoked from gone;
  v_rate_limits := public.rate_limit_prune(p_now);
  -- Bounded per run; the rest waits for the next run (or for the next read of its counter, which settles it lazily).
  v_reservations := public.metering_expire_reservations(p_now, 1000);
  v_mail := public.mail_outbox_prune(p_now, 1000);
  select * into v_webhooks from public.webhook_history_prune(p_now, 1000);
  return jsonb_build_object('revokedTokensPruned', v_revoked, 'rateLimitsPruned', v_rate_limits,
                            'reservationsExpired', v_reservations, 'mailPruned', v_mail,
                            'webhookDeliveriesPruned', v_webhooks.deliveries, 'webhookEventsPruned', v_webhooks.events);
end
$$;

revoke execute on function public.mail_outbox_prune(timestamptz, integer) from public, anon, authenticated;
revoke execute on function public.webhook_history_prune(timestamptz, integer) from public, anon, authenticated;
