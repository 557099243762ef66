-- Agent webhooks: the SQL half of review 16's mends. The rest is in functions/webhooks: the drain's claim fails unsent
-- a delivery whose type its endpoint no longer lists (drain.ts), a PATCH that enables an endpoint again or gives it a
-- new url queues its pending deliveries again (endpoints.ts, redelivered_at: see 4), and a redelivery clears
-- delivered_at (deliveries.ts).
--
-- 1. An endpoint deleted while a change emits an event for it no longer fails the change. public.webhook_emit read
--    the agent's endpoints with its snapshot and inserted one delivery each; the foreign key check of that insert
--    waited for the deleting transaction (the delete of an endpoint with a backlog cascades over its deliveries and
--    takes a while, which is when an admin deletes a failing one) and, once it committed, failed with 23503: the
--    user's checkout or usage call answered 500 and was lost. Now the insert selects the endpoints FOR KEY SHARE: it
--    waits for a delete in flight and, once that commits, the deleted endpoint is no longer returned (READ COMMITTED
--    re-checks the locked row), so no delivery is written for it; a delete that rolls back leaves the delivery. KEY
--    SHARE does not conflict with updates of other columns (PATCH, the drain's failing_since), so an emit waits for
--    no such update. An event no delivery is left for is not kept (none is written when no endpoint wants it).
-- 2. Done deliveries are dated by when they ended. public.webhook_history_prune dated one by coalesce(delivered_at,
--    last_attempt_at, created_at); one failed unsent (behind another, or of a type taken off its endpoint) has neither
--    of the first two, so it was dated by when it was queued, up to 72 hours before it failed, and deleted that much
--    before its 30 days. Every path that ends a delivery (delivered, failed after attempts, failed unsent by the
--    drain or by a PATCH of the endpoint's events) sets next_attempt_at to the time it ended, and has since the
--    first version: the prune reads that, with an index of its own instead of the expression index of 20261125000800.
-- 3. A removed user's subscriptions end with a subscription.canceled. Removing a user (POST /api/auth/admin/remove-user,
--    or any delete of the user row) takes their subscriptions by the foreign key's cascade, and the webhook triggers
--    fire on insert and update only: the agent backend, which learns of subscriptions from these events, was never
--    told the subscription ended and kept serving it (and could not ask: the user's tokens went with the user). Now,
--    before the user row goes, each of their subscriptions not yet canceled is set canceled as the service's own
--    cancel writes it (nothing left pending; canceled_at and updated_at: the removal's time, the removal has no clock
--    of the service to read), so the update trigger emits
--    subscription.canceled with the usual data, userId included (the agent knows that id, and needs it to stop
--    serving the user). The other triggers on that update do nothing for it: subscriptions_note_access keeps
--    granted_access (a canceled subscription grants nothing), and subscriptions_continue_usage acts only when a
--    subscription first grants access. No mail is queued and nothing referring to the user is written. Named to run
--    after user_removal_locks_organizations (triggers of one event run in name order), so the removal still takes
--    its organizations first, and after user_keeps_a_platform_admin, whose refusal leaves nothing to undo.
--    Paid subscriptions are still canceled at Stripe after the removal (functions/billing/user-removal.ts), which
--    reads them before it. Deleting an agent does not delete users: it is not affected.
-- 4. webhook_deliveries.redelivered_at (20261126001400: "when an admin last redelivered it") is when the delivery was
--    queued again: by an admin's redelivery, or by its endpoint being enabled again or given a new url. Its 24 hours
--    and its 72 hours count from then: the days an endpoint was disabled counted against its backlog, which failed
--    unsent, or after one attempt, once it was enabled again, though pending deliveries "wait and go out, in order".
--    Said in the column's comment; written by functions/webhooks/endpoints.ts (updateWebhook) and deliveries.ts.

-- (1) restated from 20261123000600_agent_webhooks.sql with the insert's lock, and no event kept without a delivery
create or replace function public.webhook_emit(p_agent_id uuid, p_type text, p_data jsonb, p_now timestamptz)
returns uuid
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_event_id uuid;
  v_seq bigint;
begin
  if p_type is null or p_type not in ('subscription.created', 'subscription.updated', 'subscription.canceled',
                                      'usage.threshold_reached', 'reservation.expired') then
    raise exception 'unknown webhook event type %', p_type using errcode = '22023';
  end if;
  if p_agent_id is null or not exists (
    select 1 from public.webhook_endpoints e where e.agent_id = p_agent_id and e.enabled and p_type = any (e.events)
  ) then
    return null;
  end if;
  insert into public.webhook_events (agent_id, type, data, occurred_at)
  values (p_agent_id, p_type, coalesce(p_data, '{}'::jsonb), coalesce(p_now, now()))
  returning id, seq into v_event_id, v_seq;
  -- FOR KEY SHARE (added in 20261127003300): waits for a delete of the endpoint in flight, and skips it once that
  -- commits, instead of failing the caller's change with the foreign key's 23503
  insert into public.webhook_deliveries (id, endpoint_id, event_id, event_seq, created_at)
  select public.webhook_delivery_id(coalesce(p_now, now())), e.id, v_event_id, v_seq, coalesce(p_now, now())
  from public.webhook_endpoints e
  where e.agent_id = p_agent_id and e.enabled and p_type = any (e.events)
  order by e.id
  for key share of e;
  if not found then
    -- every endpoint that wanted it was deleted meanwhile (added in 20261127003300)
    delete from public.webhook_events where id = v_event_id;
    return null;
  end if;
  return v_event_id;
end
$$;
revoke execute on function public.webhook_emit(uuid, text, jsonb, timestamptz) from public, anon, authenticated;

-- (2) restated from 20261125000800_webhook_delivery_retention.sql, dating a done delivery by next_attempt_at
drop index public.webhook_deliveries_done_idx;
create index webhook_deliveries_ended_idx on public.webhook_deliveries (next_attempt_at) where status <> 'pending';

create or replace function public.webhook_history_prune(p_now timestamptz, p_limit integer)
returns table (deliveries integer, events integer)
language plpgsql volatile
set search_path = public, pg_temp
as $$
begin
  with done as (
    -- a done delivery's next_attempt_at is when it ended (changed in 20261127003300)
    select id from public.webhook_deliveries
     where status <> 'pending' and next_attempt_at < p_now - interval '30 days'
     order by next_attempt_at
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
revoke execute on function public.webhook_history_prune(timestamptz, integer) from public, anon, authenticated;

-- (3)
create function public.removed_user_ends_subscriptions() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  update public.subscriptions
     -- as the service's own cancel writes a canceled row (cancel-subscription.ts): nothing left pending
     set status = 'canceled', canceled_at = now(), cancel_at_period_end = false,
         pending_tier_id = null, pending_change_kind = null, updated_at = now()
   where user_id = old.id and status <> 'canceled';
  return old;
end
$$;
revoke all on function public.removed_user_ends_subscriptions() from public, anon, authenticated;

create trigger user_removal_subscriptions_end before delete on "user"
  for each row execute function public.removed_user_ends_subscriptions();

-- (4)
comment on column public.webhook_deliveries.redelivered_at is
  'When the delivery was queued again: by an admin''s redelivery, or by its endpoint being enabled again or given a new url; its 24 and 72 hours count from then';
comment on column public.webhook_deliveries.next_attempt_at is
  'Pending: when the drain may try it next (a claimed one: when its lease ends). Delivered or failed: when it ended';
