-- The user's "You have used all of your ..." mail counts units used, not units held (found by review 07).
--
-- public.metering_note_threshold (20261123000600_agent_webhooks.sql) queued the user's 100 % mail from the same figure
-- as the agent's usage.threshold_reached event: used + live holds (the ledger trigger of
-- 20261123000610_metering_webhook_events.sql passes both). So an agent backend that held the whole quota and released
-- it (or let the hold expire) made the marketplace mail the user "Your subscription ... has used 10 of 10 ... Further
-- use is refused" with nothing used, and that mail was the period's only one: when the user then really used the whole
-- quota, no mail came. contract.md: the user "gets one mail per period when a metric reaches 100%", and the mail says
-- "used".
--
-- Now the two are separate rules on the same ledger insert, under the counter's lock, on the change's transaction:
-- - usage.threshold_reached is unchanged: used + live holds reaching 80 % / 100 % (docs/webhooks.md: the agent needs
--   to know its holds have taken the quota), recorded once in usage_threshold_notices;
-- - the user's mail goes when the counter's `used` (increments, and commits of holds: the ledger's `increment` and
--   `committed` rows) reaches the limit, once per subscription, metric and counter, recorded in the new table
--   usage_quota_mails (public.metering_note_quota_used). A hold, its release or its expiry never mails the user.
-- The group commit's batches run the same per-call functions, whose ledger inserts fire the same trigger, so the rule
-- is the same on every path. Usage that continues across a cancel-and-restart carries the mail record with its counter,
-- as it carries the notices (subscription_continue_usage is restated whole from
-- 20261126001000_replays_follow_continued_usage.sql with one insert added, marked "(added in 20261127000500)").

-- One row per counter whose user was mailed that the quota is used up: period_start is the counter's key (the
-- billing period's start for a rolling metric, '-infinity' for a fixed one: once for the subscription's life).
create table public.usage_quota_mails (
  subscription_id uuid not null references public.subscriptions (id) on delete cascade,
  metric_id uuid not null references public.metric_definitions (id) on delete cascade,
  period_start timestamptz(3) not null,
  used bigint not null,
  quota_limit bigint not null,
  mailed_at timestamptz(3) not null,
  primary key (subscription_id, metric_id, period_start)
);
alter table public.usage_quota_mails enable row level security;
-- No policies: only the service (table owner) reads or writes it; the Data API's roles get nothing.
revoke all on public.usage_quota_mails from anon, authenticated;

-- Until now every 100 % notice queued the mail: those counters have had their period's mail.
insert into public.usage_quota_mails (subscription_id, metric_id, period_start, used, quota_limit, mailed_at)
select n.subscription_id, n.metric_id, n.period_start, n.used, n.quota_limit, n.reached_at
from public.usage_threshold_notices n
where n.threshold = 100
on conflict do nothing;

-- ---------------------------------------------------------------------------------------------------------
-- Quota thresholds for the agent (restated from 20261123000600_agent_webhooks.sql without the user's mail, which is
-- public.metering_note_quota_used below). Called after a change that can raise usage, with p_used = used + live holds
-- of the counter and p_limit = the effective limit, on the same transaction (under the counter's lock). The first
-- time in a period that usage reaches 80 % or 100 % of a positive limit, it records the threshold and emits
-- usage.threshold_reached { subscriptionId, userId, metric, threshold, used, limit, periodStart }. A jump past both
-- emits 80 then 100. Returns the thresholds reached by this call (empty when none).
-- periodStart is the counter's period; for a fixed metric (key '-infinity') the subscription's start, as the
-- usage record shows it.
-- ---------------------------------------------------------------------------------------------------------
create or replace function public.metering_note_threshold(
  p_subscription_id uuid, p_metric_id uuid, p_period_start timestamptz, p_used bigint, p_limit bigint, p_now timestamptz
) returns integer[]
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_threshold integer;
  v_reached integer[] := '{}';
  v_sub record;
  v_metric record;
  v_period_start timestamptz;
begin
  if p_limit is null or p_limit <= 0 or p_used is null or p_used::numeric * 100 < p_limit::numeric * 80 then
    return v_reached;
  end if;
  foreach v_threshold in array array[80, 100] loop
    exit when p_used::numeric * 100 < p_limit::numeric * v_threshold;
    insert into public.usage_threshold_notices (subscription_id, metric_id, period_start, threshold, used, quota_limit, reached_at)
    values (p_subscription_id, p_metric_id, p_period_start, v_threshold, p_used, p_limit, p_now)
    on conflict do nothing;
    if found then
      v_reached := v_reached || v_threshold;
    end if;
  end loop;
  if cardinality(v_reached) = 0 then
    return v_reached;
  end if;

  select s.id, s.user_id, s.agent_id, s.created_at into v_sub
  from public.subscriptions s
  where s.id = p_subscription_id;
  select m.slug into v_metric from public.metric_definitions m where m.id = p_metric_id;
  v_period_start := case when isfinite(p_period_start) then p_period_start else v_sub.created_at end;

  foreach v_threshold in array v_reached loop
    perform public.webhook_emit(v_sub.agent_id, 'usage.threshold_reached', jsonb_build_object(
      'subscriptionId', v_sub.id,
      'userId', v_sub.user_id,
      'metric', v_metric.slug,
      'threshold', v_threshold,
      'used', p_used,
      'limit', p_limit,
      'periodStart', public.webhook_iso(v_period_start)), p_now);
  end loop;
  return v_reached;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- The user's 100 % mail. Called after a change that counted units as used (an increment, a commit), with p_used =
-- the counter's used (live holds not included) and p_limit = the effective limit, on the same transaction (under the
-- counter's lock). The first time on a counter that p_used reaches a positive limit, it records the mail and queues
-- it (mail_outbox, delivered by the mail drain). Returns whether it did.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_note_quota_used(
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
         'Hello ' || u.name || E',\n\n'
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
  where u.id = v_sub.user_id;
  return true;
end
$$;

-- The ledger trigger's function (restated from 20261123000610_metering_webhook_events.sql; the triggers and their WHEN
-- clauses stay: `used` reaching the limit implies `used + reserved` at 80 % or more, so the mail's rows pass it too).
create or replace function public.metering_ledger_webhooks() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_key timestamptz;
begin
  if new.event = 'expired' then
    perform public.webhook_emit(
      s.agent_id, 'reservation.expired',
      jsonb_build_object(
        'id', r.id,
        'subscriptionId', r.subscription_id,
        'userId', s.user_id,
        'metric', m.slug,
        'status', 'expired',
        'amount', r.amount,
        'clientReqId', r.client_req_id,
        'expiresAt', public.webhook_iso(r.expires_at),
        'createdAt', public.webhook_iso(r.created_at)),
      new.created_at)
    from public.usage_reservations r
    join public.subscriptions s on s.id = r.subscription_id
    join public.metric_definitions m on m.id = r.metric_id
    where r.id = (new.details ->> 'reservationId')::uuid;
  else
    -- the counter's key: the period start for a rolling metric, '-infinity' for a fixed one (its ledger rows show
    -- the subscription's start)
    select case when m.kind = 'rolling' then new.period_start else '-infinity'::timestamptz end into v_key
    from public.metric_definitions m
    where m.id = new.metric_id;
    -- the agent: used + live holds (changed in 20261127000500: no longer mails the user)
    perform public.metering_note_threshold(new.subscription_id, new.metric_id, v_key,
                                           new.used + coalesce(new.reserved, 0), new.quota_limit, new.created_at);
    -- the user: units used only, from the rows that count units as used (added in 20261127000500)
    if new.event in ('increment', 'committed') and new.used >= new.quota_limit then
      perform public.metering_note_quota_used(new.subscription_id, new.metric_id, v_key, new.used, new.quota_limit,
                                              new.created_at);
    end if;
  end if;
  return null;
end
$$;

-- Usage continuing across a cancel-and-restart (restated whole from 20261126001000_replays_follow_continued_usage.sql,
-- with the mail record carried beside the notices).
create or replace function public.subscription_continue_usage() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_prev record;
  v_at timestamptz;
  v_prev_key timestamptz;
  v_next_key timestamptz;
  v_rolling_start timestamptz;
  v_rolling_end timestamptz;
begin
  -- when it is written granting access, or when it first does (added in 20261126000500)
  if not new.granted_access or (tg_op = 'UPDATE' and old.granted_access) then
    return null;
  end if;
  v_at := case when tg_op = 'INSERT' then new.created_at else new.updated_at end;
  select * into v_prev from public.subscription_predecessor(new.user_id, new.agent_id, new.id);
  if not found then
    return null;
  end if;
  -- what it continues: a retry of a call counted there is a replay here (added in 20261126001000)
  update public.subscriptions set continued_from = v_prev.id where id = new.id;
  if tg_op = 'INSERT' and new.stripe_subscription_id is null and v_prev.free_cycle then
    select b.period_start, b.period_end into v_rolling_start, v_rolling_end
    from public.billing_period(new.current_period_start, null, true, v_at) b;
  end if;

  -- every counter of the old subscription a call still in flight could write, taken in the batches' lock order and
  -- marked continued: such a call that holds one finishes first (what it wrote is read below); one that comes later
  -- is refused with 40001 and sent again by the group commit, to the new subscription (added in 20261126000500)
  -- (the rolling period at this time, and the one a call from an instance whose clock runs a few minutes ahead
  -- would count in)
  select b.period_start, b2.period_start into v_prev_key, v_next_key
  from public.subscriptions s
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end, s.stripe_subscription_id is null, v_at) b
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end, s.stripe_subscription_id is null,
                                           v_at + interval '5 minutes') b2
  where s.id = v_prev.id;
  insert into public.usage_counters as c (subscription_id, metric_id, period_start, used, updated_at, continued)
  select v_prev.id, k.metric_id, k.key, 0, v_at, true
  from (select m.id as metric_id, m.slug, key
          from public.metric_definitions m
          cross join lateral unnest(case when m.kind = 'fixed' then array['-infinity'::timestamptz]
                                         else array[v_prev_key, v_next_key] end) as key
         where m.agent_id = new.agent_id
        union
        select c2.metric_id, m2.slug, c2.period_start
          from public.usage_counters c2 join public.metric_definitions m2 on m2.id = c2.metric_id
         where c2.subscription_id = v_prev.id) k
  where k.key is not null
  order by k.slug, k.key
  on conflict (subscription_id, metric_id, period_start) do update set continued = true where not c.continued;

  with carried as (
    insert into public.usage_counters (subscription_id, metric_id, period_start, used, updated_at)
    select new.id, c.metric_id, c.period_start, c.used, v_at
    from public.usage_counters c
    join public.metric_definitions m on m.id = c.metric_id
    where c.subscription_id = v_prev.id and c.used > 0
      and ((m.kind = 'fixed' and c.period_start = '-infinity')
           or (m.kind = 'rolling' and c.period_start = v_rolling_start))
    returning metric_id, period_start, used
  )
  insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                   period_start, period_end, details, created_at)
  select public.quota_ledger_id(v_at), new.id, k.metric_id, 'carried_over', k.used, k.used, k.used, 0,
         public.metering_effective_limit(new.id, new.tier_id, k.metric_id, k.period_start),
         case when k.period_start = '-infinity' then new.created_at else v_rolling_start end,
         case when k.period_start = '-infinity' then null else v_rolling_end end,
         jsonb_build_object('fromSubscriptionId', v_prev.id), v_at
  from carried k
  order by k.metric_id;

  -- the notices of the carried counters, before the holds' ledger rows below could reach a threshold again
  -- (added in 20261126000500)
  insert into public.usage_threshold_notices (subscription_id, metric_id, period_start, threshold, used, quota_limit, reached_at)
  select new.id, n.metric_id, n.period_start, n.threshold, n.used, n.quota_limit, n.reached_at
  from public.usage_threshold_notices n
  join public.metric_definitions m on m.id = n.metric_id
  where n.subscription_id = v_prev.id
    and ((m.kind = 'fixed' and n.period_start = '-infinity')
         or (m.kind = 'rolling' and n.period_start = v_rolling_start));

  -- the user's 100 % mail of the carried counters: sent once per counter as it continues (added in 20261127000500)
  insert into public.usage_quota_mails (subscription_id, metric_id, period_start, used, quota_limit, mailed_at)
  select new.id, q.metric_id, q.period_start, q.used, q.quota_limit, q.mailed_at
  from public.usage_quota_mails q
  join public.metric_definitions m on m.id = q.metric_id
  where q.subscription_id = v_prev.id
    and ((m.kind = 'fixed' and q.period_start = '-infinity')
         or (m.kind = 'rolling' and q.period_start = v_rolling_start));

  -- the live holds of the carried counters move with them, each recorded on its new subscription as its reserve was
  -- (the ledger row is what a replay of the reserve request finds) (added in 20261126000500)
  with moved as (
    update public.usage_reservations r set subscription_id = new.id
    from public.metric_definitions m
    where m.id = r.metric_id and r.subscription_id = v_prev.id and r.status = 'held' and r.expires_at > v_at
      and ((m.kind = 'fixed' and r.counter_key = '-infinity')
           or (m.kind = 'rolling' and r.counter_key = v_rolling_start))
    returning r.id, r.metric_id, r.counter_key, r.period_start, r.period_end, r.client_req_id, r.amount, r.ttl_seconds,
              r.expires_at
  ), counted as (
    select h.*, sum(h.amount) over (partition by h.metric_id, h.counter_key) as reserved
    from moved h
  )
  insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                   period_start, period_end, client_req_id, details, created_at)
  select public.quota_ledger_id(v_at), new.id, h.metric_id, 'reserved', h.amount, 0, coalesce(c.used, 0),
         h.reserved, public.metering_effective_limit(new.id, new.tier_id, h.metric_id, h.counter_key),
         h.period_start, h.period_end, h.client_req_id,
         jsonb_build_object('ttlSeconds', h.ttl_seconds, 'reservationId', h.id, 'expiresAt', h.expires_at,
                            'fromSubscriptionId', v_prev.id),
         v_at
  from counted h
  left join public.usage_counters c
    on c.subscription_id = new.id and c.metric_id = h.metric_id and c.period_start = h.counter_key
  order by h.metric_id, h.expires_at, h.id;
  return null;
end
$$;

revoke execute on function public.metering_note_quota_used(uuid, uuid, timestamptz, bigint, bigint, timestamptz)
  from public, anon, authenticated;
