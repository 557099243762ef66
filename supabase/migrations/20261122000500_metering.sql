-- Usage metering: addons, the quota ledger (which doubles as the idempotency record of usage calls), billing
-- periods, and the SQL functions that do the atomic work. Time is always a parameter (`p_now`, from the
-- service's injected clock), never SQL now(), so periods, expiry and ledger times follow the service's clock.

-- ---------------------------------------------------------------------------------------------------------
-- Billing period of a subscription at a given time.
-- A subscription billed by Stripe (stripe_subscription_id set) uses Stripe's current period as stored by the
-- webhook. Any other subscription (a free tier) runs monthly from its start, the same day each month, clamped
-- to the month's end (a 31 January start has periods starting 28/29 Feb, 31 Mar, 30 Apr, ...): its stored
-- current_period_start is that anchor, and the period in effect is computed from it, so no job rolls it over.
-- Months are counted in UTC so the period never depends on the session's time zone.
-- ---------------------------------------------------------------------------------------------------------
create function public.billing_period(
  p_anchor timestamptz,
  p_stored_end timestamptz,
  p_computed boolean,
  p_now timestamptz,
  out period_start timestamptz,
  out period_end timestamptz
) language sql immutable parallel safe as $$
  select
    case when p_computed then (a + make_interval(months => n)) at time zone 'UTC' else p_anchor end,
    case when p_computed then (a + make_interval(months => n + 1)) at time zone 'UTC' else p_stored_end end
  from (
    select a, greatest(0, m - case when a + make_interval(months => m) > t then 1 else 0 end) as n
    from (
      select a, t,
             ((extract(year from t) - extract(year from a)) * 12 + extract(month from t) - extract(month from a))::int as m
      from (select p_anchor at time zone 'UTC' as a, p_now at time zone 'UTC' as t) x
    ) y
  ) z
$$;

-- Counter key of a metric for a subscription: rolling metrics count per billing period (keyed by its start),
-- fixed metrics have one counter for the subscription's life, keyed '-infinity' (see usage_counters).
create function public.metering_counter_key(p_kind text, p_period_start timestamptz)
returns timestamptz language sql immutable parallel safe as $$
  select case when p_kind = 'rolling' then p_period_start else '-infinity'::timestamptz end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Addons: quota bonuses on one metric of one subscription. `permanent` counts for the subscription's life;
-- `one_cycle` (rolling metrics only) counts only in the billing period it was granted in (period_start).
-- Revoking keeps the row (revoked_at) so the history stays readable.
-- ---------------------------------------------------------------------------------------------------------
create table public.usage_addons (
  id uuid primary key default gen_random_uuid(),
  subscription_id uuid not null references public.subscriptions (id) on delete cascade,
  metric_id uuid not null references public.metric_definitions (id) on delete restrict,
  amount bigint not null check (amount > 0),
  duration text not null check (duration in ('permanent', 'one_cycle')),
  period_start timestamptz(3),
  note text check (char_length(note) <= 1000),
  granted_by text,
  revoked_at timestamptz(3),
  revoked_by text,
  created_at timestamptz(3) not null default now(),
  constraint usage_addons_cycle_period check ((duration = 'one_cycle') = (period_start is not null))
);
-- The quota check sums a subscription's live addons on one metric.
create index usage_addons_live_idx on public.usage_addons (subscription_id, metric_id)
  include (amount, duration, period_start) where revoked_at is null;
create index usage_addons_list_idx on public.usage_addons (subscription_id, created_at desc, id desc);
create index usage_addons_metric_idx on public.usage_addons (metric_id);

-- Metric deletion asks whether any counter references the metric.
create index usage_counters_metric_idx on public.usage_counters (metric_id);

-- ---------------------------------------------------------------------------------------------------------
-- Quota ledger: every event on a subscription's metering, newest first. One row per increment (admitted or
-- denied), decrement, addon grant/revoke, and tier quota change affecting the subscription.
-- A usage call's row is also its idempotency record: (metric, subscription, client_req_id) is unique, and the
-- row carries the call's result (used, quota_limit, period), so a replay reads it back and changes nothing.
-- `delta` is what the event did to the counter: sum(delta) over a counter's rows equals its `used`.
-- Ids are time-ordered (the clock's milliseconds, then a sequence), so "newest first" is exact even when many
-- events share one millisecond.
-- ---------------------------------------------------------------------------------------------------------
create sequence public.quota_ledger_seq;

create function public.quota_ledger_id(p_at timestamptz) returns uuid language sql volatile as $$
  -- UUIDv7 layout: 48-bit unix milliseconds, version 7, variant 10, then the sequence in the low 60 bits.
  select (lpad(to_hex(greatest(0, floor(extract(epoch from p_at) * 1000))::bigint), 12, '0')
          || '7000' || '8' || lpad(to_hex(nextval('public.quota_ledger_seq')), 15, '0'))::uuid
$$;

create table public.quota_ledger (
  id uuid primary key,
  subscription_id uuid not null references public.subscriptions (id) on delete cascade,
  metric_id uuid not null references public.metric_definitions (id) on delete restrict,
  event text not null check (event in (
    'increment', 'increment_denied', 'decrement', 'addon_granted', 'addon_revoked', 'quota_changed')),
  -- usage events: the amount asked for; addon events: the addon's amount; quota_changed: the new tier quota
  amount bigint,
  delta bigint not null default 0,
  -- the counter after the event (usage events) and the effective quota it was checked against (null = unlimited)
  used bigint,
  quota_limit bigint,
  period_start timestamptz(3),
  period_end timestamptz(3),
  client_req_id text check (char_length(client_req_id) between 1 and 255),
  addon_id uuid references public.usage_addons (id) on delete set null,
  actor_user_id text,
  details jsonb not null default '{}'::jsonb,
  created_at timestamptz(3) not null
);
create index quota_ledger_subscription_idx on public.quota_ledger (subscription_id, created_at desc, id desc);
-- The idempotency key. metric_id leads so the same index answers "is this metric referenced?".
create unique index quota_ledger_request_key on public.quota_ledger (metric_id, subscription_id, client_req_id);

alter table public.usage_addons enable row level security;
alter table public.quota_ledger enable row level security;
-- A signed-in user may read the addons on their own subscriptions; the ledger is for the service and admins.
create policy usage_addons_owner_read on public.usage_addons for select to authenticated
  using (exists (select 1 from public.subscriptions s where s.id = subscription_id and s.user_id = (auth.jwt() ->> 'sub')));
grant select on public.usage_addons to authenticated;

-- ---------------------------------------------------------------------------------------------------------
-- Effective quota of a subscription's metric in the period keyed by p_counter_key: the tier quota row
-- (null = unlimited, no row = 0) plus live addons (permanent, and one_cycle granted in this period).
-- Returns null for unlimited.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_effective_limit(
  p_subscription_id uuid, p_tier_id uuid, p_metric_id uuid, p_period_start timestamptz
) returns bigint language sql stable as $$
  select case
    when q.tier_id is not null and q.quota_limit is null then null
    else coalesce(q.quota_limit, 0) + coalesce((
      select sum(a.amount) from public.usage_addons a
      where a.subscription_id = p_subscription_id and a.metric_id = p_metric_id and a.revoked_at is null
        and (a.duration = 'permanent' or a.period_start = p_period_start)), 0)::bigint
  end
  from (select 1) one
  left join public.tier_quotas q on q.tier_id = p_tier_id and q.metric_id = p_metric_id
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Check and increment: the metering hot path, one call, one transaction.
-- Outcomes: ok | quota_exceeded | subscription_required | metric_not_found | key_reused.
-- Order of work, and why:
--   1. the caller's active subscription to the agent and the metric by slug (two unique-index lookups);
--   2. a stored result for (metric, subscription, clientReqId) is returned as is: replays change nothing;
--   3. the counter is incremented first, which locks its row; only then is the quota read, in a fresh
--      snapshot, so a revoke or quota cut that committed while we waited for the lock is seen (revokes and
--      quota changes lock the same rows). Over the limit, the increment is taken back in the same
--      transaction, so no other transaction ever sees it;
--   4. the ledger row is the idempotency record. If a concurrent call with the same clientReqId committed
--      first, its row wins: we take our increment back and answer its result.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_increment(
  p_user_id text, p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid; v_created timestamptz; v_anchor timestamptz; v_stored_end timestamptz; v_computed boolean;
  v_metric_id uuid; v_kind text;
  v_start timestamptz; v_end timestamptz; v_key timestamptz;
  v_used bigint; v_limit bigint; v_ok boolean;
  v_prev record;
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at, s.current_period_start, s.current_period_end, s.stripe_subscription_id is null
    into v_sub_id, v_tier_id, v_created, v_anchor, v_stored_end, v_computed
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and s.status in ('active', 'past_due')
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::text, null::bigint, null::bigint, null::timestamptz, null::timestamptz, null::bigint;
    return;
  end if;

  select m.id, m.kind into v_metric_id, v_kind
  from public.metric_definitions m where m.agent_id = p_agent_id and m.slug = p_metric_slug;
  if v_metric_id is null then
    return query select 'metric_not_found'::text, false, null::text, null::bigint, null::bigint, null::timestamptz, null::timestamptz, null::bigint;
    return;
  end if;

  select l.event, l.used, l.quota_limit, l.period_start, l.period_end, l.amount into v_prev
  from public.quota_ledger l
  where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
  if found then
    return query select
      case v_prev.event when 'increment' then 'ok' when 'increment_denied' then 'quota_exceeded' else 'key_reused' end,
      true, v_kind, v_prev.used, v_prev.quota_limit, v_prev.period_start, v_prev.period_end, v_prev.amount;
    return;
  end if;

  if v_kind = 'rolling' then
    select b.period_start, b.period_end into v_start, v_end from public.billing_period(v_anchor, v_stored_end, v_computed, p_now) b;
    v_key := v_start;
  else
    -- a fixed metric counts over the subscription's life: its record shows the subscription's start, no end
    v_start := v_created; v_end := null; v_key := '-infinity';
  end if;

  insert into public.usage_counters as c (subscription_id, metric_id, period_start, used, updated_at)
  values (v_sub_id, v_metric_id, v_key, p_amount, p_now)
  on conflict (subscription_id, metric_id, period_start)
    do update set used = c.used + excluded.used, updated_at = excluded.updated_at
  returning c.used into v_used;

  v_limit := public.metering_effective_limit(v_sub_id, v_tier_id, v_metric_id, v_key);
  v_ok := v_limit is null or v_used <= v_limit;
  if not v_ok then
    update public.usage_counters c set used = c.used - p_amount
    where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = v_key
    returning c.used into v_used;
  end if;

  insert into public.quota_ledger as l (id, subscription_id, metric_id, event, amount, delta, used, quota_limit,
                                        period_start, period_end, client_req_id, created_at)
  values (public.quota_ledger_id(p_now), v_sub_id, v_metric_id, case when v_ok then 'increment' else 'increment_denied' end,
          p_amount, case when v_ok then p_amount else 0 end, v_used, v_limit, v_start, v_end, p_client_req_id, p_now)
  on conflict (metric_id, subscription_id, client_req_id) do nothing;
  if not found then
    -- a concurrent call with this clientReqId committed first: its result stands, ours is taken back
    if v_ok then
      update public.usage_counters c set used = c.used - p_amount
      where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = v_key;
    end if;
    return query select
      case l.event when 'increment' then 'ok' when 'increment_denied' then 'quota_exceeded' else 'key_reused' end,
      true, v_kind, l.used, l.quota_limit, l.period_start, l.period_end, l.amount
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
    return;
  end if;

  return query select case when v_ok then 'ok' else 'quota_exceeded' end, false, v_kind, v_used, v_limit, v_start, v_end, p_amount;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Decrement of a fixed metric (e.g. a site deleted). Floors at 0; idempotent when a clientReqId is given.
-- Outcomes: ok | subscription_required | metric_not_found | not_decrementable | key_reused.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_decrement(
  p_user_id text, p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid; v_created timestamptz;
  v_metric_id uuid; v_kind text;
  v_before bigint; v_used bigint; v_limit bigint;
  v_prev record;
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at into v_sub_id, v_tier_id, v_created
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and s.status in ('active', 'past_due')
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::text, null::bigint, null::bigint, null::timestamptz, null::timestamptz, null::bigint;
    return;
  end if;

  select m.id, m.kind into v_metric_id, v_kind
  from public.metric_definitions m where m.agent_id = p_agent_id and m.slug = p_metric_slug;
  if v_metric_id is null then
    return query select 'metric_not_found'::text, false, null::text, null::bigint, null::bigint, null::timestamptz, null::timestamptz, null::bigint;
    return;
  end if;
  if v_kind <> 'fixed' then
    return query select 'not_decrementable'::text, false, v_kind, null::bigint, null::bigint, null::timestamptz, null::timestamptz, null::bigint;
    return;
  end if;

  if p_client_req_id is not null then
    select l.event, l.used, l.quota_limit, l.period_start, l.period_end, l.amount into v_prev
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
    if found then
      return query select case when v_prev.event = 'decrement' then 'ok' else 'key_reused' end,
        true, v_kind, v_prev.used, v_prev.quota_limit, v_prev.period_start, v_prev.period_end, v_prev.amount;
      return;
    end if;
  end if;

  select c.used into v_before from public.usage_counters c
  where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = '-infinity'
  for update;
  v_before := coalesce(v_before, 0);
  v_used := greatest(v_before - p_amount, 0);
  if v_used <> v_before then
    update public.usage_counters c set used = v_used, updated_at = p_now
    where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = '-infinity';
  end if;
  v_limit := public.metering_effective_limit(v_sub_id, v_tier_id, v_metric_id, '-infinity');

  insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, quota_limit,
                                   period_start, period_end, client_req_id, created_at)
  values (public.quota_ledger_id(p_now), v_sub_id, v_metric_id, 'decrement', p_amount, v_used - v_before, v_used, v_limit,
          v_created, null, p_client_req_id, p_now)
  on conflict (metric_id, subscription_id, client_req_id) do nothing;
  if not found then
    -- a concurrent decrement with this clientReqId committed first (we waited on the counter lock): undo ours
    if v_used <> v_before then
      update public.usage_counters c set used = v_before
      where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = '-infinity';
    end if;
    return query select case when l.event = 'decrement' then 'ok' else 'key_reused' end,
      true, v_kind, l.used, l.quota_limit, l.period_start, l.period_end, l.amount
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
    return;
  end if;

  return query select 'ok'::text, false, v_kind, v_used, v_limit, v_created, null::timestamptz, p_amount;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Usage of every metric of a subscription's agent at p_now (reads; nothing is written).
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_usage(p_subscription_id uuid, p_now timestamptz)
returns table (
  metric_id uuid, metric text, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz
) language sql stable as $$
  select m.id, m.slug, m.kind,
         coalesce(c.used, 0)::bigint,
         public.metering_effective_limit(s.id, s.tier_id, m.id, public.metering_counter_key(m.kind, b.period_start)),
         case when m.kind = 'rolling' then b.period_start else s.created_at end,
         case when m.kind = 'rolling' then b.period_end end
  from public.subscriptions s
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end,
                                           s.stripe_subscription_id is null, p_now) b
  join public.metric_definitions m on m.agent_id = s.agent_id
  left join public.usage_counters c
    on c.subscription_id = s.id and c.metric_id = m.id
   and c.period_start = public.metering_counter_key(m.kind, b.period_start)
  where s.id = p_subscription_id
  order by m.slug
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Takes the current-period counter locks of (subscriptions, metric) before a change that can lower an
-- effective quota (addon revoke, tier quota cut or removal), so the change serializes with in-flight
-- increments: an increment either commits before the change or reads the new quota after it. A missing
-- counter row is created at 0 first, so a period's first increment cannot slip past the change either.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_lock_counters(p_subscription_ids uuid[], p_metric_id uuid, p_now timestamptz)
returns void language plpgsql volatile as $$
begin
  insert into public.usage_counters (subscription_id, metric_id, period_start, used, updated_at)
  select s.id, m.id, public.metering_counter_key(m.kind, b.period_start), 0, p_now
  from public.subscriptions s
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end,
                                           s.stripe_subscription_id is null, p_now) b
  join public.metric_definitions m on m.id = p_metric_id
  where s.id = any (p_subscription_ids)
  order by s.id
  on conflict do nothing;
  perform 1 from public.usage_counters c
  where c.subscription_id = any (p_subscription_ids) and c.metric_id = p_metric_id
  order by c.subscription_id, c.period_start
  for update;
end
$$;
