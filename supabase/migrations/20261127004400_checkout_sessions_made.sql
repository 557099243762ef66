-- The Checkout Sessions this service made, and for whom: a read of one (GET /me/checkout/{sessionId}) or a completion
-- of an anonymous one (POST /checkout/anonymous/complete) is judged here first, before it spends an allowance or asks
-- Stripe anything.
--
-- Why: both used to read the session at Stripe before anything could tell whose it was, so a made-up id cost a Stripe
-- read and one of the caller's allowance (functions/billing/allowances.ts). Review 24 stopped another site's <img> of
-- /me/checkout/cs_... (rule 29), but not another site navigating a popup through the built-in success page
-- (/checkout/success?session_id=cs_made_up): that page reads the id with a same-origin fetch, which is the user's own
-- doing by its fetch metadata, so a page the user opened could still spend their 100 reads a day, and their own
-- success page was then refused 429 until the next day. Stripe's own redirect to that page is a cross-site navigation
-- too, so the page cannot tell the two apart; the ids can: only the buyer, the agent whose token started the checkout
-- and an admin who made the link know a real one.
--
-- A row is written once Stripe made the session (functions/billing/checkout.ts), with the buyer (null: anonymous,
-- Stripe collects the address) and the agent whose tier it sells. Kept 30 days (Stripe expires an open session after
-- at most 24 hours; a success page reads it within minutes), pruned by the housekeeping, 1,000 per run, oldest first.
-- A session made before this migration is not here: its read answers 404 and its anonymous completion 404 (the
-- webhook still places the purchase; those sessions expired within a day of the deploy).
create table public.checkout_sessions (
  session_id text primary key,
  user_id text references "user" (id) on delete cascade,
  agent_id uuid not null,
  created_at timestamptz not null default now()
);
create index checkout_sessions_created_idx on public.checkout_sessions (created_at);
create index checkout_sessions_user_idx on public.checkout_sessions (user_id);
alter table public.checkout_sessions enable row level security;
-- No policies and no grants: only the service (table owner) reads or writes them.
revoke all on public.checkout_sessions from anon, authenticated;

create function public.checkout_sessions_prune(p_now timestamptz, p_limit integer) returns integer
language sql volatile
set search_path = public, pg_temp
as $$
  with old as (
    select session_id from public.checkout_sessions
     where created_at < p_now - interval '30 days'
     order by created_at
     limit p_limit
  ), gone as (delete from public.checkout_sessions c using old where c.session_id = old.session_id returning 1)
  select count(*)::integer from gone
$$;
revoke execute on function public.checkout_sessions_prune(timestamptz, integer) from public, anon, authenticated;

-- The housekeeping of 20261125000900, with the one line more.
create or replace function public.background_housekeeping(p_now timestamptz)
returns jsonb
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_revoked integer;
  v_rate_limits integer;
  v_reservations integer;
  v_mail integer;
  v_webhooks record;
  v_sign_in record;
  v_checkout_sessions integer;
begin
  -- First, while this transaction holds no other row: it takes users' rows, and an end of a grant holding one of them
  -- writes the user's revocation-list row next, which the delete below may hold (a deadlock, the other way round).
  select * into v_sign_in from public.sign_in_records_prune(p_now, 1000);
  -- A revocation-list row only matters until the last access token it covers has expired.
  with gone as (delete from public.revoked_tokens where expires_at < p_now returning 1)
  select count(*)::integer into v_revoked from gone;
  v_rate_limits := public.rate_limit_prune(p_now);
  -- Bounded per run; the rest waits for the next run (or for the next read of its counter, which settles it lazily).
  v_reservations := public.metering_expire_reservations(p_now, 1000);
  v_mail := public.mail_outbox_prune(p_now, 1000);
  select * into v_webhooks from public.webhook_history_prune(p_now, 1000);
  v_checkout_sessions := public.checkout_sessions_prune(p_now, 1000);
  return jsonb_build_object('revokedTokensPruned', v_revoked, 'rateLimitsPruned', v_rate_limits,
                            'reservationsExpired', v_reservations, 'mailPruned', v_mail,
                            'webhookDeliveriesPruned', v_webhooks.deliveries, 'webhookEventsPruned', v_webhooks.events,
                            'sessionsPruned', v_sign_in.sessions, 'verificationsPruned', v_sign_in.verifications,
                            'refreshTokensPruned', v_sign_in.refresh_tokens, 'checkoutSessionsPruned', v_checkout_sessions);
end
$$;
revoke execute on function public.background_housekeeping(timestamptz) from public, anon, authenticated;
