-- A deleted agent made active again gets back the renewals the background work stopped (functions/billing/
-- deleted-agents.ts; found by review 08: a mistaken deletion ended every subscriber's renewal for good). The round
-- finds them by their mark, agent_deleted_mailed_at (20261127000900), cleared again once the renewal is resumed: few
-- rows, on an index of their own.
create index subscriptions_agent_deleted_mailed_idx on public.subscriptions (agent_id) where agent_deleted_mailed_at is not null;
