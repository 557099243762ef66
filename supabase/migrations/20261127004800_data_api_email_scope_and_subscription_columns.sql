-- The Data API (PostgREST, role `authenticated` with the user's access token) showed an agent more than the HTTP API
-- does (review 40; rules 5 and 28):
--
-- 1. A waitlist entry holds an address (the user's own, as they typed it): an agent's token the user granted without
--    the `email` scope read it from `waitlist_entries.email`, where over HTTP that token learns no address (GET /me
--    leaves it out; the waitlist status answers as to a stranger). Now a token reads waitlist entries only when it may
--    be told the address: the first-party client's, or one carrying the `email` scope (`seesEmail` in
--    functions/http/access.ts: no agent, or the scope).
-- 2. `subscriptions` was granted whole: Stripe's customer and subscription ids, the pending invoice, the webhook
--    bookkeeping. The HTTP API's subscription shows none of them. Now the columns it shows are granted (on Supabase the
--    default privileges grant the table, hence the revoke first), as tiers' were (20261127000200).

create function public.data_api_token_sees_email() returns boolean
language sql stable
as $$
  -- the scope first: a token that has it needs no second look; otherwise only a live first-party token
  -- (data_api_token_reaches(null): the API's audience and no agent's)
  select coalesce(' ' || (auth.jwt() ->> 'scope') || ' ' like '% email %', false) or public.data_api_token_reaches(null)
$$;
revoke all on function public.data_api_token_sees_email() from public, anon;
grant execute on function public.data_api_token_sees_email() to authenticated;

alter policy waitlist_entries_owner_read on public.waitlist_entries
  using (public.data_api_token_may_read(user_id, agent_id) and public.data_api_token_sees_email());

revoke select on public.subscriptions from anon, authenticated;
grant select (id, user_id, agent_id, tier_id, status, current_period_start, current_period_end, cancel_at_period_end,
              pending_tier_id, pending_change_kind, created_at)
  on public.subscriptions to authenticated;
