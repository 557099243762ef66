-- A usage call is judged by the tier its subscription is on when it counts, not the one it had when the call began
-- (found by review 20).
--
-- public.metering_increment and public.metering_reserve read the subscription (its tier_id among the rest) in their
-- first statement, then take the counter's row lock, waiting for any other batch or change on that counter, then
-- asked public.metering_effective_limit for the limit of the tier_id read before the wait. A tier change committed
-- during that wait (an admin's change-tier, a downgrade Stripe applies at the period's turn, written by the webhook)
-- was not seen: the increment was admitted against the quota of a tier the subscription had left (quota 10 instead of
-- 1: 200 instead of 429), against docs/internals/metering.md ("no increment is ever admitted against a quota that was
-- already lowered"). The decrement's and the commit's ledger rows recorded that stale limit too. Taking counter locks
-- in the tier change would not help, the tier having been read before the wait.
--
-- The limit is the one place that reads a tier's quota, so the mend is there: the effective limit of a subscription
-- that is written reads its stored tier_id, as the statement asking sees it. Each caller asks after taking its
-- counter's lock, in a statement of its own (READ COMMITTED: a fresh snapshot, which sees a change committed during
-- the wait), so every usage path is judged by the tier as it is then; a change committing later comes after the call
-- in every sense (it committed later, the call holding its counter). p_tier_id only serves a subscription not written
-- yet; every caller passes the row's own tier (read earlier in the same function, or the row itself in a query or an
-- after-trigger), so for them nothing else changes. One primary-key read per call. The period the counter is keyed by
-- is still the one read first: a renewal committing during the wait counts the call in the period that just ended,
-- which it was sent in.
--
-- Restated from 20261125000500 with the tier read from the subscription (marked); create or replace keeps its owner
-- and privileges.
create or replace function public.metering_effective_limit(
  p_subscription_id uuid, p_tier_id uuid, p_metric_id uuid, p_period_start timestamptz
) returns bigint language plpgsql stable as $$
begin
  -- the tier's quota (none: 0; a null quota: unlimited) plus the live addons of this counter's period
  return (
    select case
      when q.tier_id is not null and q.quota_limit is null then null
      else coalesce(q.quota_limit, 0) + coalesce((
        select sum(a.amount) from public.usage_addons a
        where a.subscription_id = p_subscription_id and a.metric_id = p_metric_id and a.revoked_at is null
          and (a.duration = 'permanent' or a.period_start = p_period_start)), 0)::bigint
    end
    from (select 1) one
    -- the subscription's tier as it is now, the given one only for a subscription not written yet
    -- (changed in 20261127003800)
    left join public.tier_quotas q
      on q.tier_id = coalesce((select s.tier_id from public.subscriptions s where s.id = p_subscription_id), p_tier_id)
     and q.metric_id = p_metric_id);
end
$$;
