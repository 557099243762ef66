-- An endpoint that stays down no longer holds each of its deliveries for a day of its own, one after another.
--
-- Deliveries go out per endpoint in event order, and a failure was retried for 24 hours from that delivery's own first
-- attempt. A delivery waiting behind a failing one makes no attempt, so its 24 hours began only when the one before it
-- failed for good: an endpoint that never came back failed one delivery a day while its agent's events kept arriving,
-- and its backlog (pending deliveries are never pruned) grew for ever. Found by the review of the outbox's limits.
--
-- Now the 24 hours are counted from the later of when the delivery was queued (made, or redelivered by an admin) and
-- when its endpoint began failing: a delivery gets at least 24 hours of its endpoint failing before it is `failed`,
-- and no more. When one fails for good, those waiting behind it whose 24 hours are over too fail with it, unsent (one
-- more try each would hold them at one per 10 s behind an endpoint that accepts connections and never answers,
-- slower than a busy agent's events arrive). So what waits for a dead endpoint is about the last day of events, and
-- an endpoint that comes back gets those in order.
--   - webhook_endpoints.failing_since: when the endpoint's current run of failed attempts began; null after a
--     delivered attempt, and when an admin changes the endpoint's url or enables it again (a new receiver, or one
--     the admin says is back, starts with a fresh window).
--   - webhook_deliveries.redelivered_at: when an admin last redelivered it (its fresh 24 hours count from then).
-- functions/webhooks/drain.ts writes both columns in the statement that records an attempt.
alter table public.webhook_endpoints add column failing_since timestamptz(3);
alter table public.webhook_deliveries add column redelivered_at timestamptz(3);

-- The rule, in one place (functions/webhooks/drain.ts calls it for the attempted delivery and for those waiting behind
-- it): a delivery queued at p_queued, whose endpoint has been failing since p_failing_since, has had its 24 hours once
-- both are at or before p_cutoff (the attempt's time less 24 hours). A delivery waiting behind one that fails for good
-- whose 24 hours are over fails with it, unsent: its endpoint failed all through them.
create function public.webhook_retries_over(p_queued timestamptz, p_failing_since timestamptz, p_cutoff timestamptz)
returns boolean language sql immutable parallel safe as $$
  select p_failing_since <= p_cutoff and p_queued <= p_cutoff
$$;
revoke all on function public.webhook_retries_over(timestamptz, timestamptz, timestamptz) from public, anon, authenticated;
