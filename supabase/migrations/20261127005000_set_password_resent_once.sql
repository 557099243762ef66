-- A buyer's new account whose set-password mail was lost (a connection cut between the account's commit and the mail's)
-- gets it from a later call for the purchase (functions/billing/buyer-accounts.ts `mailSetPasswordIfLost`). Deciding
-- "lost" from the mail outbox alone re-mailed after the outbox's 7-day retention had pruned a delivered mail, and every
-- call running at once mailed (review 43). Now the resend is claimed on the purchase's customer row, once: the first
-- call that finds the mail lost takes the row (its lock makes the others wait, then find it taken), and it is done
-- only within 6 days of the account, while the outbox still shows what was sent.
alter table public.billing_customers add column set_password_resent_at timestamptz(3);
