-- A restored agent's subscription is resumed under a claim, not under a lock held while Stripe answers (review 13).
--
-- 59e2844 held the subscription row's lock (FOR UPDATE) while Stripe renewed it, so that a cancel by the user, an
-- admin or a ban came before or after the renewal, never between. But every usage call's foreign-key check takes a key
-- share of that row: the subscriber's increments waited on Stripe and answered 503 after their 2 s lock timeout; and on
-- the embedded database the transaction held its one connection, so every request of the service waited on Stripe.
-- Now a round claims the resume (this column, set in a statement of its own while the round's mark is set and no other
-- round's claim is younger than 10 minutes), asks Stripe, and then clears the mark and the claim only if the claim is
-- still its own. A cancel clears both, before it asks Stripe; a round that finds its claim cleared and the mark gone
-- puts the cancel back at Stripe after its own call (functions/billing/deleted-agents.ts, cancel-subscription.ts).
alter table public.subscriptions add column agent_resume_claimed_at timestamptz(3);
comment on column public.subscriptions.agent_resume_claimed_at is
  'When a background round began resuming the renewal of this subscription of a restored agent (cleared when done, or by a cancel)';
