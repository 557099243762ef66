-- Expired sign-in records are deleted, not kept for ever. The auth library writes a row per sign-in ("session", 7
-- days), per verification link, password-reset token or authorization code ("verification", minutes to a day) and per
-- refresh-token rotation ("oauthRefreshToken", 30 days: an agent refreshing every 10 hours leaves 2-3 rows a day per
-- user), and deletes one only when somebody presents it again. The rest stayed: the tables only grew, and each row
-- names its user (and a session its IP address and user agent).
--
-- Deleting an expired row changes no answer:
--   - a session: the library refuses an expired one (getSession) and its introspection already calls inactive every
--     access token whose `sid` names an expired session. Deleting it fires session_end_revokes_tokens
--     (20261122000301), so our own bearer routes now agree with that introspection, as they do after a sign-out:
--     the access tokens bound to the session stop working, and an offline_access refresh token, detached from the
--     session by its foreign key, still gives a new one (docs/oauth.md, "Grants end from the user's side too").
--   - a verification row: the library refuses an expired one; an unknown one gets the same answer.
--   - a refresh token: the library checks expiry before anything else, so an expired one is refused with
--     invalid_grant and never triggers the reuse detection; an unknown one is refused with invalid_grant too. Our
--     wrapper's family revocation (functions/auth/oauth/protocol-gaps.ts) only acts on a rotated token the library
--     wiped, which an expired one never is.
-- The other two library tables that expire rows stay empty here: access tokens are always JWTs (the token endpoint
-- always names a resource) so "oauthAccessToken" gets no rows, and no client may use private_key_jwt, so neither does
-- "oauthClientAssertion".
--
-- Bounded like the rest of the housekeeping: at most 1,000 of each per run, oldest first, each read from an index on
-- its expiry; the next run takes the rest. The delete checks the expiry again: a session the library extends (its
-- updateAge) between the pick and the delete stays.
create index session_expires_at_idx on "session" ("expiresAt");
create index verification_expires_at_idx on "verification" ("expiresAt");
create index "oauthRefreshToken_expiresAt_idx" on "oauthRefreshToken" ("expiresAt");

create function public.sign_in_records_prune(p_now timestamptz, p_limit integer)
returns table (sessions integer, verifications integer, refresh_tokens integer)
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_sessions text[];
  v_refresh_tokens text[];
begin
  select coalesce(array_agg(id), '{}') into v_sessions
    from (select id from "session" where "expiresAt" < p_now order by "expiresAt" limit p_limit) s;
  select coalesce(array_agg(id), '{}') into v_refresh_tokens
    from (select id from "oauthRefreshToken" where "expiresAt" < p_now order by "expiresAt" limit p_limit) r;
  -- The users' rows first, in one order, as everything that ends a grant or writes a refresh token takes them
  -- (20261125001000): a password change deleting the same rows in another order would otherwise deadlock with this.
  perform 1 from "user" u
   where u.id in (select "userId" from "session" where id = any(v_sessions)
                  union select "userId" from "oauthRefreshToken" where id = any(v_refresh_tokens))
   order by u.id for key share;
  with gone as (delete from "session" s where s.id = any(v_sessions) and s."expiresAt" < p_now returning 1)
  select count(*)::integer into sessions from gone;
  with old as (
    select id from "verification" where "expiresAt" < p_now order by "expiresAt" limit p_limit
  ), gone as (delete from "verification" v using old where v.id = old.id and v."expiresAt" < p_now returning 1)
  select count(*)::integer into verifications from gone;
  with gone as (
    delete from "oauthRefreshToken" r where r.id = any(v_refresh_tokens) and r."expiresAt" < p_now returning 1)
  select count(*)::integer into refresh_tokens from gone;
  return next;
end
$$;

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
  return jsonb_build_object('revokedTokensPruned', v_revoked, 'rateLimitsPruned', v_rate_limits,
                            'reservationsExpired', v_reservations, 'mailPruned', v_mail,
                            'webhookDeliveriesPruned', v_webhooks.deliveries, 'webhookEventsPruned', v_webhooks.events,
                            'sessionsPruned', v_sign_in.sessions, 'verificationsPruned', v_sign_in.verifications,
                            'refreshTokensPruned', v_sign_in.refresh_tokens);
end
$$;

revoke execute on function public.sign_in_records_prune(timestamptz, integer) from public, anon, authenticated;
