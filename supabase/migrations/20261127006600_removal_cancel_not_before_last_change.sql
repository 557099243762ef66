-- A removed user's subscription.canceled is never timestamped before the subscription's earlier events (review 95).
--
-- Every subscription write takes its time from the service's clock, which the row's updated_at keeps and the webhook
-- event's `timestamp` is; the removal's cancel (removed_user_ends_subscriptions, migration 20261127003300) took the
-- database's now(). With the service's host clock ahead of the database's (instances may disagree by minutes: the
-- leases read the database's clock for that reason, functions/platform/lease.ts), a user removed soon after subscribing
-- sent `subscription.canceled` with a time before `subscription.created`'s: a receiver doing what docs/webhooks.md says
-- (apply an event whose timestamp is equal to or later than the state it holds) dropped the cancel, and served a user
-- who no longer exists. The cancel's time is now never before the row's last change.

create or replace function public.removed_user_ends_subscriptions() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  update public.subscriptions
     -- as the service's own cancel writes a canceled row (cancel-subscription.ts): nothing left pending
     set status = 'canceled', canceled_at = greatest(now(), updated_at), cancel_at_period_end = false,
         pending_tier_id = null, pending_change_kind = null, updated_at = greatest(now(), updated_at)
   where user_id = old.id and status <> 'canceled';
  return old;
end
$$;
