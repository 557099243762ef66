-- Paid subscriptions Stripe has not told us about since their period ended are read again (found by review 15).
--
-- A paid subscription's row changes only when a Stripe event about it arrives. Stripe retries a webhook delivery for
-- three days and then gives up, so an endpoint down or misconfigured that long (or an event type left off it) lost
-- those changes for good: a subscription canceled at Stripe stayed `active` here and was served for ever, and one
-- renewed stayed in its old period (its rolling quota never turned). Nothing compared a row with Stripe.
--
-- Now the background work (functions/billing/overdue-subscriptions.ts) reads again, from Stripe, the paid
-- subscriptions still live here whose period ended a day ago or more: Stripe renews or ends a subscription at its
-- period's end, so by then an event should have moved the row on. The read is written by the one writer, as an event
-- would be. stripe_checked_at is when it was last taken for that, so a subscription whose read changes nothing (one
-- Stripe itself left behind, or gone from Stripe) is read again only every 6 hours, and two rounds at once (FOR UPDATE
-- SKIP LOCKED on the row) never read the same one.
alter table public.subscriptions add column stripe_checked_at timestamptz(3);

-- The round's search: live paid rows by the end of their period.
create index subscriptions_paid_live_period_end_idx on public.subscriptions (current_period_end)
  where stripe_subscription_id is not null and status <> 'canceled';
