-- A cancel made while a restored agent's renewal is being resumed is kept until Stripe has it (review 14).
--
-- 20261127001800 resumed under a claim: a cancel cleared the claim, and the round that found its claim cleared asked
-- Stripe for the cancel again after its own renewal. That intent lived only in the round's memory: one Stripe error,
-- a failed read or a restart between the two and Stripe renewed a subscription its user had canceled (answered 200),
-- for good, since no later round looked at the row again. And a round whose claim had lapsed (stalled for 10 minutes)
-- read another round's finished resume (mark and claim cleared) as a cancel, and ended a renewal nobody canceled.
-- Now a cancel that clears a claim leaves this mark; every round asks Stripe for the cancel of each row that has it,
-- and clears it once Stripe has answered (functions/billing/deleted-agents.ts, cancel-subscription.ts). A round reads
-- a cleared claim as a cancel only when this mark is there.
alter table public.subscriptions add column agent_resume_canceled_at timestamptz(3);
comment on column public.subscriptions.agent_resume_canceled_at is
  'When a cancel was made while a background round resumed this subscription''s renewal; cleared once Stripe has the cancel';
create index subscriptions_agent_resume_canceled_idx on public.subscriptions (id) where agent_resume_canceled_at is not null;
