-- No delivery waits more than 72 hours after it was queued, whatever its endpoint does meanwhile (found by a hostile
-- review of webhooks).
--
-- 20261126001400 counts a delivery's 24 hours of retries from the later of when it was queued and when its endpoint
-- began failing, and a delivered attempt ends the endpoint's run of failures. So the agent's own receiver, answering
-- 2xx to one message a day and 503 to every other, began everyone's 24 hours again each day: nothing ever failed, and
-- pending deliveries (never pruned) piled up for as long as the agent made events (each hold it lets expire is one).
-- A receiver that accepts everything but slowly, slower than its agent's events come, grew its backlog the same way.
--
-- Now a delivery is also over 72 hours after it was queued (made, or redelivered by an admin): then it fails, the one
-- attempted after that attempt fails, and those waiting behind any attempt (delivered or not) fail unsent. 72 hours
-- is Stripe's own retry window for its webhooks; a delivery still gets its 24 hours of its endpoint failing unless
-- the marketplace's own drain was down for more than two days before them. So what waits for one endpoint is at
-- most three days of its agent's events, whatever the receiver answers.
-- Called by functions/webhooks/drain.ts in the statement that records an attempt.
create function public.webhook_delivery_outlived(p_queued timestamptz, p_cutoff timestamptz)
returns boolean language sql immutable parallel safe as $$
  -- p_cutoff is the attempt's time less 24 hours (as for webhook_retries_over): 72 hours since queued
  select p_queued <= p_cutoff - interval '48 hours'
$$;
revoke all on function public.webhook_delivery_outlived(timestamptz, timestamptz) from public, anon, authenticated;

-- Restated from 20261126001400 with the 72 hours added.
create or replace function public.webhook_retries_over(p_queued timestamptz, p_failing_since timestamptz, p_cutoff timestamptz)
returns boolean language sql immutable parallel safe as $$
  select (p_failing_since <= p_cutoff and p_queued <= p_cutoff) or public.webhook_delivery_outlived(p_queued, p_cutoff)
$$;
revoke all on function public.webhook_retries_over(timestamptz, timestamptz, timestamptz) from public, anon, authenticated;
