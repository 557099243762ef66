-- An agent an admin deleted (DELETE /agents/{agentId}: status 'inactive') can no longer be used, yet its paid
-- subscriptions went on renewing at Stripe every period (found by a review). The background work now sets each to
-- cancel at period end (functions/billing/deleted-agents.ts) and mails its user once: this column is that mail's mark,
-- set in the transaction that queues the mail, so two rounds (two instances) never mail the same subscriber twice.
alter table public.subscriptions add column agent_deleted_mailed_at timestamptz(3);

-- The round's search: live paid subscriptions not yet set to end, of the few agents that are inactive.
create index subscriptions_renewing_paid_idx on public.subscriptions (agent_id)
  where stripe_subscription_id is not null and status <> 'canceled' and not cancel_at_period_end;
