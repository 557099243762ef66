-- Mail that has left is not kept for ever. The outbox holds each mail's full text, and the mails carry links with
-- tokens in them: a password reset, an email verification, a purchase claim. Until now a sent mail stayed in
-- public.mail_outbox for good: a backup, a replica or anyone with read access to the table could read every
-- link ever mailed, and the table only grew. The housekeeping (20261123000700) now also deletes the mails that are
-- done (sent, logged in development, or failed for good) 7 days after they were done. Every link has expired by then:
-- the longest-lived, a purchase claim, expires after 7 days too. A week is long enough to answer "did the mail go
-- out?", and the request log keeps who asked for it.
--
-- Bounded like the rest: at most 1,000 mails per run, oldest first; the next run (every minute under pg_cron, or
-- every drain) takes the rest. Pending mails are never touched. The index keeps each run from reading the whole
-- week of mail (a drain may run every few seconds).
create index mail_outbox_done_idx on public.mail_outbox ((coalesce(sent_at, next_attempt_at, created_at)))
  where status <> 'pending';

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
begin
  -- A revocation-list row only matters until the last access token it covers has expired.
  with gone as (delete from public.revoked_tokens where expires_at < p_now returning 1)
  select count(*)::integer into v_revoked from gone;
  v_rate_limits := public.rate_limit_prune(p_now);
  -- Bounded per run; the rest waits for the next run (or for the next read of its counter, which settles it lazily).
  v_reservations := public.metering_expire_reservations(p_now, 1000);
  with done as (
    select id from public.mail_outbox
     where status <> 'pending' and coalesce(sent_at, next_attempt_at, created_at) < p_now - interval '7 days'
     order by coalesce(sent_at, next_attempt_at, created_at)
     limit 1000
  ), gone as (delete from public.mail_outbox m using done where m.id = done.id returning 1)
  select count(*)::integer into v_mail from gone;
  return jsonb_build_object('revokedTokensPruned', v_revoked, 'rateLimitsPruned', v_rate_limits,
                            'reservationsExpired', v_reservations, 'mailPruned', v_mail);
end
$$;
