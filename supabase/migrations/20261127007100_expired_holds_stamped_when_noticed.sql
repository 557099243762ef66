-- Holds the housekeeping expires are stamped with the time it noticed them, not with its cutoff (review 99's fix,
-- 20261127007000, read again).
--
-- The housekeeping now runs with p_now = the database's clock less 5 minutes, as the cutoff of what has ended. Every
-- other part of it only deletes; the reservations' part also writes: the hold's settled_at, the `expired` ledger row's
-- created_at (and its time-ordered id), and so the `reservation.expired` webhook event's time. Stamped with the cutoff,
-- those went 5 minutes back: a ledger row and an event older than rows written before them, against docs/webhooks.md
-- (a receiver applying newer-or-equal times) and docs/metering.md (the event's time is when the expiry was noticed).
-- The cutoff and the stamp are now two values: public.metering_expire_reservations_due(due before, settled at, limit),
-- the one definition of the sweep; metering_expire_reservations(p_now, p_limit) keeps its meaning (both p_now), and
-- the housekeeping stamps with the later of its p_now and the database's clock (a test running it at a chosen time
-- ahead still stamps that time).

create function public.metering_expire_reservations_due(p_due_before timestamptz, p_settled_at timestamptz, p_limit integer default 1000)
returns integer language plpgsql volatile
set search_path = public, pg_temp
as $$
begin
  return public.metering_settle_expired(array(
    select r.id from public.usage_reservations r
    where r.status = 'held' and r.expires_at <= p_due_before
    order by r.expires_at
    limit greatest(coalesce(p_limit, 1000), 0)
    for update skip locked), p_settled_at, greatest(coalesce(p_limit, 1000), 0));
end
$$;
revoke execute on function public.metering_expire_reservations_due(timestamptz, timestamptz, integer) from public, anon, authenticated;

create or replace function public.metering_expire_reservations(p_now timestamptz, p_limit integer default 1000)
returns integer language sql volatile as $$
  select public.metering_expire_reservations_due(p_now, p_now, p_limit)
$$;

-- Restated from 20261127004400 with only the reservations' line changed.
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
  v_reservations := public.metering_expire_reservations_due(p_now, greatest(p_now, now()), 1000); -- (changed in 20261127007100)
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
