-- The user's 100 % mail (security rule 30) opened with the account's name as typed: 'Hello ' || u.name, unquoted.
-- A name is anyone's free text (200 characters, one line) and the account's address is whatever its maker typed,
-- so one sign-up with a stranger's address and a name such as "Your Agent Marketplace account is suspended ...
-- restore it at https://..." used a small free quota and had the marketplace mail that sentence, from its own
-- sender, to the stranger (review 54). Every other mail quotes user text as what it is (quotedText in
-- functions/platform/mailer.ts); this one now names nobody, and goes only to an address its owner confirmed: an
-- unverified account's use is recorded as mailed (one mail per period, as before) and mails no one.
create or replace function public.metering_note_quota_used(
  p_subscription_id uuid, p_metric_id uuid, p_period_start timestamptz, p_used bigint, p_limit bigint, p_now timestamptz
) returns boolean
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_sub record;
  v_metric record;
begin
  if p_limit is null or p_limit <= 0 or p_used is null or p_used < p_limit then
    return false;
  end if;
  insert into public.usage_quota_mails (subscription_id, metric_id, period_start, used, quota_limit, mailed_at)
  values (p_subscription_id, p_metric_id, p_period_start, p_used, p_limit, p_now)
  on conflict do nothing;
  if not found then
    return false;
  end if;

  select s.user_id, a.name as agent_name into v_sub
  from public.subscriptions s join public.agents a on a.id = s.agent_id
  where s.id = p_subscription_id;
  select m.name, m.unit into v_metric from public.metric_definitions m where m.id = p_metric_id;
  insert into public.mail_outbox (to_address, subject, text_body, created_at, next_attempt_at)
  select u.email,
         'You have used all of your ' || v_metric.name || ' on ' || v_sub.agent_name,
         E'Hello,\n\n'
           || 'Your subscription to ' || v_sub.agent_name || ' has used ' || p_used || ' of ' || p_limit || ' '
           || coalesce(nullif(v_metric.unit, ''), v_metric.name)
           || case when isfinite(p_period_start)
                   then ' in the billing period that started ' || to_char(p_period_start at time zone 'UTC', 'YYYY-MM-DD') || ' (UTC)'
                   else '' end
           || E'.\n\nFurther use is refused until '
           || case when isfinite(p_period_start) then 'the next period starts or ' else '' end
           || E'your quota grows (a larger plan or an addon).\n\nThis is the only mail about it for this period.\n',
         p_now, p_now
  from public."user" u
  where u.id = v_sub.user_id and u."emailVerified";
  return true;
end
$$;

revoke execute on function public.metering_note_quota_used(uuid, uuid, timestamptz, bigint, bigint, timestamptz)
  from public, anon, authenticated;
