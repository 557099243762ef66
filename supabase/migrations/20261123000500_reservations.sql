-- Usage reservations and idempotency conflicts (contract.md revision 2, Usage).
--
-- A reservation (hold) sets units aside before an action whose cost is known only afterwards; the agent backend
-- then commits the actual amount (0..held, counted as used) or releases the hold. A hold counts against the quota
-- from the moment it is granted, under the same rule and the same lock as an increment:
--
--     admitted  <=>  used + live holds + amount <= effective limit        (null limit = unlimited)
--
-- evaluated while holding the row lock of the counter (usage_counters), which increments, decrements, reserves and
-- commits all take first. So an increment and a hold race for the same remaining units and never both pass.
-- A hold is live while status = 'held' and expires_at > p_now (the service's clock): expiry needs no job, every
-- check counts only unexpired holds. The status change and the ledger's `expired` row catch up lazily: when the hold
-- is next touched (commit, release, read, a replay of its reserve), when another reserve on the same counter runs,
-- or when a scheduler calls public.metering_expire_reservations.
--
-- The quota ledger stays the idempotency record of every call that carries a clientReqId, reserves included, so
-- one key names one request per (metric, subscription) whatever the operation. The same key with another
-- operation, amount or ttl is an `idempotency_conflict` carrying the first call's request, and changes nothing.
--
-- Ledger rows of reservations: `reserved` (or `reserve_denied`) with delta 0, `committed` with delta = the committed
-- amount, `released` and `expired` with delta 0; so sum(delta) over a counter's rows still equals its `used`.
-- Every usage result now also carries `reserved` (live holds on the counter), and ledger rows of usage calls store
-- it next to `used`, so a replay answers exactly what the first call did.
--
-- Lock order, to stay free of deadlocks: a counter row, then reservation rows of that counter. The expiry sweep of
-- the scheduler locks reservation rows only (it never changes a counter), so it waits on nobody.

alter table public.quota_ledger drop constraint quota_ledger_event_check;
alter table public.quota_ledger add constraint quota_ledger_event_check check (event in (
  'increment', 'increment_denied', 'decrement', 'addon_granted', 'addon_revoked', 'quota_changed',
  'reserved', 'reserve_denied', 'committed', 'released', 'expired'));
-- usage events: units held by live reservations on the counter right after the event (null on older rows: 0)
alter table public.quota_ledger add column reserved bigint;

create table public.usage_reservations (
  id uuid primary key default gen_random_uuid(),
  subscription_id uuid not null references public.subscriptions (id) on delete cascade,
  metric_id uuid not null references public.metric_definitions (id) on delete restrict,
  -- the counter the hold counts against (usage_counters.period_start): the billing period's start for a rolling
  -- metric at the time of the reserve, '-infinity' for a fixed one. A commit counts into this same counter.
  counter_key timestamptz(3) not null,
  period_start timestamptz(3) not null,
  period_end timestamptz(3),
  client_req_id text not null check (char_length(client_req_id) between 1 and 255),
  amount bigint not null check (amount > 0),
  ttl_seconds integer not null check (ttl_seconds between 1 and 3600),
  status text not null default 'held' check (status in ('held', 'committed', 'released', 'expired')),
  committed_amount bigint check (committed_amount between 0 and amount),
  expires_at timestamptz(3) not null,
  settled_at timestamptz(3),
  created_at timestamptz(3) not null,
  constraint usage_reservations_committed check ((status = 'committed') = (committed_amount is not null)),
  constraint usage_reservations_settled check ((status = 'held') = (settled_at is null))
);
-- The quota check sums the live holds of one counter.
create index usage_reservations_held_idx on public.usage_reservations (subscription_id, metric_id, counter_key)
  include (amount, expires_at) where status = 'held';
-- The scheduler's sweep takes the oldest unsettled expired holds first.
create index usage_reservations_expiry_idx on public.usage_reservations (expires_at) where status = 'held';
-- One hold per reserve request (the ledger row is the idempotency record; this is the same rule, kept by the table).
create unique index usage_reservations_request_key on public.usage_reservations (metric_id, subscription_id, client_req_id);

alter table public.usage_reservations enable row level security;
-- No policy: reservations are the agent backend's, through the service only.
revoke all on public.usage_reservations from anon, authenticated;

-- ---------------------------------------------------------------------------------------------------------
-- Units held by live reservations on one counter at p_now.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_live_holds(
  p_subscription_id uuid, p_metric_id uuid, p_counter_key timestamptz, p_now timestamptz
) returns bigint language sql stable as $$
  select coalesce(sum(r.amount), 0)::bigint
  from public.usage_reservations r
  where r.subscription_id = p_subscription_id and r.metric_id = p_metric_id and r.counter_key = p_counter_key
    and r.status = 'held' and r.expires_at > p_now
$$;

-- The request a ledger row records, as an idempotency conflict shows it: { operation, amount, ttlSeconds? }.
create function public.metering_original_request(p_event text, p_amount bigint, p_details jsonb)
returns jsonb language sql immutable as $$
  select jsonb_strip_nulls(jsonb_build_object(
    'operation', case when p_event in ('increment', 'increment_denied') then 'increment'
                      when p_event in ('reserved', 'reserve_denied') then 'reserve'
                      else p_event end,
    'amount', p_amount,
    'ttlSeconds', case when p_event in ('reserved', 'reserve_denied') then (p_details ->> 'ttlSeconds')::int end))
$$;

-- Locks a counter row (creating it at 0 if missing) and returns its `used`.
create function public.metering_counter_for_update(
  p_subscription_id uuid, p_metric_id uuid, p_counter_key timestamptz, p_now timestamptz
) returns bigint language sql volatile as $$
  insert into public.usage_counters as c (subscription_id, metric_id, period_start, used, updated_at)
  values (p_subscription_id, p_metric_id, p_counter_key, 0, p_now)
  on conflict (subscription_id, metric_id, period_start) do update set used = c.used
  returning c.used
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Marks the given holds expired if they are still held and past expires_at at p_now, one `expired` ledger row
-- each (delta 0: an expired hold never counted as used). Returns how many it marked. Concurrent callers are safe:
-- the UPDATE re-checks status after any row lock it waited for, so a hold is settled once.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_settle_expired(p_reservation_ids uuid[], p_now timestamptz)
returns integer language plpgsql volatile as $$
declare
  v_count integer;
begin
  if p_reservation_ids is null or cardinality(p_reservation_ids) = 0 then
    return 0;
  end if;
  with expired as (
    update public.usage_reservations r set status = 'expired', settled_at = p_now
    where r.id = any (p_reservation_ids) and r.status = 'held' and r.expires_at <= p_now
    returning r.id, r.subscription_id, r.metric_id, r.counter_key, r.period_start, r.period_end, r.amount, r.expires_at
  ), written as (
    insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                     period_start, period_end, details, created_at)
    select public.quota_ledger_id(p_now), e.subscription_id, e.metric_id, 'expired', e.amount, 0, coalesce(c.used, 0),
           public.metering_live_holds(e.subscription_id, e.metric_id, e.counter_key, p_now),
           public.metering_effective_limit(s.id, s.tier_id, e.metric_id, e.counter_key),
           e.period_start, e.period_end,
           jsonb_build_object('reservationId', e.id, 'expiresAt', e.expires_at), p_now
    from expired e
    join public.subscriptions s on s.id = e.subscription_id
    left join public.usage_counters c
      on c.subscription_id = e.subscription_id and c.metric_id = e.metric_id and c.period_start = e.counter_key
    order by e.expires_at, e.id
    returning 1
  )
  select count(*)::int into v_count from written;
  return v_count;
end
$$;

-- For a scheduler (pg_cron, or the Node entry's loop): settles up to p_limit expired holds, oldest first, skipping
-- holds another transaction is settling. Returns how many it marked. Nothing depends on it running: it only brings
-- the ledger (and the hold's status) up to date.
create function public.metering_expire_reservations(p_now timestamptz, p_limit integer default 1000)
returns integer language plpgsql volatile as $$
begin
  return public.metering_settle_expired(array(
    select r.id from public.usage_reservations r
    where r.status = 'held' and r.expires_at <= p_now
    order by r.expires_at
    limit greatest(coalesce(p_limit, 1000), 0)
    for update skip locked), p_now);
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- A reservation as the API shows it, with the usage record of the counter it holds on (read at p_now).
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_reservation_state(p_reservation_id uuid, p_now timestamptz)
returns table (
  reservation_id uuid, status text, amount bigint, committed_amount bigint, expires_at timestamptz, created_at timestamptz,
  metric text, kind text, used bigint, reserved bigint, quota_limit bigint, period_start timestamptz, period_end timestamptz
) language sql stable as $$
  select r.id,
         -- a hold past its expiry is expired even before the lazy write has caught up
         case when r.status = 'held' and r.expires_at <= p_now then 'expired' else r.status end,
         r.amount, r.committed_amount, r.expires_at, r.created_at, m.slug, m.kind,
         coalesce(c.used, 0)::bigint,
         public.metering_live_holds(r.subscription_id, r.metric_id, r.counter_key, p_now),
         public.metering_effective_limit(s.id, s.tier_id, r.metric_id, r.counter_key),
         r.period_start, r.period_end
  from public.usage_reservations r
  join public.subscriptions s on s.id = r.subscription_id
  join public.metric_definitions m on m.id = r.metric_id
  left join public.usage_counters c
    on c.subscription_id = r.subscription_id and c.metric_id = r.metric_id and c.period_start = r.counter_key
  where r.id = p_reservation_id
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Check and increment, now counting live holds, storing `reserved` with the result, and answering a reused
-- clientReqId of another request as `idempotency_conflict` (was: a different amount silently replayed the first
-- result, a different operation was `key_reused`).
-- Outcomes: ok | quota_exceeded | subscription_required | metric_not_found | idempotency_conflict.
-- Order of work as before (20261122000500_metering.sql): the counter is incremented first, which locks its row;
-- only then are the holds and the quota read, in a fresh snapshot.
-- ---------------------------------------------------------------------------------------------------------
drop function public.metering_increment(text, uuid, text, text, bigint, timestamptz);
create function public.metering_increment(
  p_user_id text, p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint, reserved bigint, original jsonb
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid; v_created timestamptz; v_anchor timestamptz; v_stored_end timestamptz; v_computed boolean;
  v_metric_id uuid; v_kind text;
  v_start timestamptz; v_end timestamptz; v_key timestamptz;
  v_used bigint; v_reserved bigint; v_limit bigint; v_ok boolean;
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
    return query select 'subscription_required'::text, false, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;

  select m.id, m.kind into v_metric_id, v_kind
  from public.metric_definitions m where m.agent_id = p_agent_id and m.slug = p_metric_slug;
  if v_metric_id is null then
    return query select 'metric_not_found'::text, false, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;

  select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
  from public.quota_ledger l
  where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;

  if not found then
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
    v_reserved := public.metering_live_holds(v_sub_id, v_metric_id, v_key, p_now);
    v_ok := v_limit is null or v_used + v_reserved <= v_limit;
    if not v_ok then
      update public.usage_counters c set used = c.used - p_amount
      where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = v_key
      returning c.used into v_used;
    end if;

    insert into public.quota_ledger as l (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                          period_start, period_end, client_req_id, created_at)
    values (public.quota_ledger_id(p_now), v_sub_id, v_metric_id, case when v_ok then 'increment' else 'increment_denied' end,
            p_amount, case when v_ok then p_amount else 0 end, v_used, v_reserved, v_limit, v_start, v_end, p_client_req_id, p_now)
    on conflict (metric_id, subscription_id, client_req_id) do nothing;
    if found then
      return query select case when v_ok then 'ok' else 'quota_exceeded' end, false, v_kind, v_used, v_limit, v_start, v_end,
                          p_amount, v_reserved, null::jsonb;
      return;
    end if;

    -- a concurrent call with this clientReqId committed first: its result stands, ours is taken back
    if v_ok then
      update public.usage_counters c set used = c.used - p_amount
      where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = v_key;
    end if;
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
  end if;

  -- the stored result of this clientReqId: a replay of the same request, or another request under the same key
  if v_prev.event in ('increment', 'increment_denied') and v_prev.amount = p_amount then
    return query select case v_prev.event when 'increment' then 'ok' else 'quota_exceeded' end, true, v_kind,
                        v_prev.used, v_prev.quota_limit, v_prev.period_start, v_prev.period_end, v_prev.amount,
                        coalesce(v_prev.reserved, 0), null::jsonb;
  else
    return query select 'idempotency_conflict'::text, true, v_kind, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint,
                        public.metering_original_request(v_prev.event, v_prev.amount, v_prev.details);
  end if;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Decrement of a fixed metric, now with `reserved` and idempotency conflicts (see metering_increment).
-- Outcomes: ok | subscription_required | metric_not_found | not_decrementable | idempotency_conflict.
-- ---------------------------------------------------------------------------------------------------------
drop function public.metering_decrement(text, uuid, text, text, bigint, timestamptz);
create function public.metering_decrement(
  p_user_id text, p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint, reserved bigint, original jsonb
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid; v_created timestamptz;
  v_metric_id uuid; v_kind text;
  v_before bigint; v_used bigint; v_reserved bigint; v_limit bigint;
  v_prev record; v_seen boolean := false;
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at into v_sub_id, v_tier_id, v_created
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and s.status in ('active', 'past_due')
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;

  select m.id, m.kind into v_metric_id, v_kind
  from public.metric_definitions m where m.agent_id = p_agent_id and m.slug = p_metric_slug;
  if v_metric_id is null then
    return query select 'metric_not_found'::text, false, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;
  if v_kind <> 'fixed' then
    return query select 'not_decrementable'::text, false, v_kind, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;

  if p_client_req_id is not null then
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
    v_seen := found;
  end if;

  if not v_seen then
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
    v_reserved := public.metering_live_holds(v_sub_id, v_metric_id, '-infinity', p_now);

    insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                     period_start, period_end, client_req_id, created_at)
    values (public.quota_ledger_id(p_now), v_sub_id, v_metric_id, 'decrement', p_amount, v_used - v_before, v_used, v_reserved,
            v_limit, v_created, null, p_client_req_id, p_now)
    on conflict (metric_id, subscription_id, client_req_id) do nothing;
    if found then
      return query select 'ok'::text, false, v_kind, v_used, v_limit, v_created, null::timestamptz, p_amount, v_reserved, null::jsonb;
      return;
    end if;

    -- a concurrent call with this clientReqId committed first (we waited on the counter lock): undo ours
    if v_used <> v_before then
      update public.usage_counters c set used = v_before
      where c.subscription_id = v_sub_id and c.metric_id = v_metric_id and c.period_start = '-infinity';
    end if;
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
  end if;

  if v_prev.event = 'decrement' and v_prev.amount = p_amount then
    return query select 'ok'::text, true, v_kind, v_prev.used, v_prev.quota_limit, v_prev.period_start, v_prev.period_end,
                        v_prev.amount, coalesce(v_prev.reserved, 0), null::jsonb;
  else
    return query select 'idempotency_conflict'::text, true, v_kind, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::bigint,
                        public.metering_original_request(v_prev.event, v_prev.amount, v_prev.details);
  end if;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Usage of every metric of a subscription's agent at p_now, now with the live holds (reads; nothing is written).
-- ---------------------------------------------------------------------------------------------------------
drop function public.metering_usage(uuid, timestamptz);
create function public.metering_usage(p_subscription_id uuid, p_now timestamptz)
returns table (
  metric_id uuid, metric text, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, reserved bigint
) language sql stable as $$
  select m.id, m.slug, m.kind,
         coalesce(c.used, 0)::bigint,
         public.metering_effective_limit(s.id, s.tier_id, m.id, k.counter_key),
         case when m.kind = 'rolling' then b.period_start else s.created_at end,
         case when m.kind = 'rolling' then b.period_end end,
         public.metering_live_holds(s.id, m.id, k.counter_key, p_now)
  from public.subscriptions s
  cross join lateral public.billing_period(s.current_period_start, s.current_period_end,
                                           s.stripe_subscription_id is null, p_now) b
  join public.metric_definitions m on m.agent_id = s.agent_id
  cross join lateral (select public.metering_counter_key(m.kind, b.period_start) as counter_key) k
  left join public.usage_counters c
    on c.subscription_id = s.id and c.metric_id = m.id and c.period_start = k.counter_key
  where s.id = p_subscription_id
  order by m.slug
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Reserve: hold p_amount units of a metric for p_ttl_seconds, idempotent on p_client_req_id.
-- Outcomes: ok | quota_exceeded | subscription_required | metric_not_found | idempotency_conflict.
-- A replay answers the reservation as it is now (same id; settled lazily if it has expired meanwhile); a replay
-- of a denied reserve answers the stored 429.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_reserve(
  p_user_id text, p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_ttl_seconds integer,
  p_now timestamptz
) returns table (
  outcome text, replayed boolean,
  reservation_id uuid, status text, amount bigint, committed_amount bigint, expires_at timestamptz, created_at timestamptz,
  metric text, kind text, used bigint, reserved bigint, quota_limit bigint, period_start timestamptz, period_end timestamptz,
  requested bigint, original jsonb
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid; v_created timestamptz; v_anchor timestamptz; v_stored_end timestamptz; v_computed boolean;
  v_metric_id uuid; v_kind text;
  v_start timestamptz; v_end timestamptz; v_key timestamptz;
  v_used bigint; v_reserved bigint; v_limit bigint; v_ok boolean;
  v_id uuid; v_expires timestamptz;
  v_prev record;
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;
  if p_ttl_seconds is null or p_ttl_seconds < 1 or p_ttl_seconds > 3600 then
    raise exception 'ttl must be 1..3600 seconds' using errcode = '22023';
  end if;
  if p_client_req_id is null then
    raise exception 'a reserve needs a clientReqId' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at, s.current_period_start, s.current_period_end, s.stripe_subscription_id is null
    into v_sub_id, v_tier_id, v_created, v_anchor, v_stored_end, v_computed
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and s.status in ('active', 'past_due')
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  select m.id, m.kind into v_metric_id, v_kind
  from public.metric_definitions m where m.agent_id = p_agent_id and m.slug = p_metric_slug;
  if v_metric_id is null then
    return query select 'metric_not_found'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
  from public.quota_ledger l
  where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;

  if not found then
    if v_kind = 'rolling' then
      select b.period_start, b.period_end into v_start, v_end from public.billing_period(v_anchor, v_stored_end, v_computed, p_now) b;
      v_key := v_start;
    else
      v_start := v_created; v_end := null; v_key := '-infinity';
    end if;

    -- the counter lock first (the same lock increments take), then the holds of this counter
    v_used := public.metering_counter_for_update(v_sub_id, v_metric_id, v_key, p_now);
    perform public.metering_settle_expired(array(
      select r.id from public.usage_reservations r
      where r.subscription_id = v_sub_id and r.metric_id = v_metric_id and r.counter_key = v_key
        and r.status = 'held' and r.expires_at <= p_now), p_now);
    v_reserved := public.metering_live_holds(v_sub_id, v_metric_id, v_key, p_now);
    v_limit := public.metering_effective_limit(v_sub_id, v_tier_id, v_metric_id, v_key);
    v_ok := v_limit is null or v_used + v_reserved + p_amount <= v_limit;
    v_id := gen_random_uuid();
    v_expires := p_now + make_interval(secs => p_ttl_seconds);

    insert into public.quota_ledger as l (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                          period_start, period_end, client_req_id, details, created_at)
    values (public.quota_ledger_id(p_now), v_sub_id, v_metric_id, case when v_ok then 'reserved' else 'reserve_denied' end,
            p_amount, 0, v_used, v_reserved + case when v_ok then p_amount else 0 end, v_limit, v_start, v_end, p_client_req_id,
            case when v_ok then jsonb_build_object('ttlSeconds', p_ttl_seconds, 'reservationId', v_id, 'expiresAt', v_expires)
                 else jsonb_build_object('ttlSeconds', p_ttl_seconds) end,
            p_now)
    on conflict (metric_id, subscription_id, client_req_id) do nothing;
    if found then
      if v_ok then
        insert into public.usage_reservations (id, subscription_id, metric_id, counter_key, period_start, period_end, client_req_id,
                                               amount, ttl_seconds, status, expires_at, created_at)
        values (v_id, v_sub_id, v_metric_id, v_key, v_start, v_end, p_client_req_id, p_amount, p_ttl_seconds, 'held', v_expires, p_now);
        return query select 'ok'::text, false, s.*, p_amount, null::jsonb from public.metering_reservation_state(v_id, p_now) s;
      else
        return query select 'quota_exceeded'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                            null::timestamptz, p_metric_slug, v_kind, v_used, v_reserved, v_limit, v_start, v_end, p_amount, null::jsonb;
      end if;
      return;
    end if;

    -- a concurrent call with this clientReqId committed first (we waited on the counter lock): its result stands
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.quota_ledger l
    where l.metric_id = v_metric_id and l.subscription_id = v_sub_id and l.client_req_id = p_client_req_id;
  end if;

  if v_prev.event in ('reserved', 'reserve_denied') and v_prev.amount = p_amount
     and (v_prev.details ->> 'ttlSeconds')::int = p_ttl_seconds then
    if v_prev.event = 'reserved' then
      v_id := (v_prev.details ->> 'reservationId')::uuid;
      perform public.metering_settle_expired(array[v_id], p_now);
      return query select 'ok'::text, true, s.*, v_prev.amount, null::jsonb from public.metering_reservation_state(v_id, p_now) s;
    else
      return query select 'quota_exceeded'::text, true, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                          null::timestamptz, p_metric_slug, v_kind, v_prev.used, coalesce(v_prev.reserved, 0), v_prev.quota_limit,
                          v_prev.period_start, v_prev.period_end, v_prev.amount, null::jsonb;
    end if;
  else
    return query select 'idempotency_conflict'::text, true, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, p_metric_slug, v_kind, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, public.metering_original_request(v_prev.event, v_prev.amount, v_prev.details);
  end if;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Commit, release or read one reservation of the caller's active subscription to the agent.
--   commit:  counts p_amount (0..held) as used on the hold's counter and frees the hold; a repeat with the same
--            amount answers the same reservation; another amount is an idempotency_conflict.
--   release: frees the hold; a repeat answers the same reservation.
--   read:    the reservation now (an expired hold is settled on the way).
-- Outcomes: ok | subscription_required | reservation_not_found | expired | invalid_state | amount_over_hold |
--           idempotency_conflict.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_settle_reservation(
  p_user_id text, p_agent_id uuid, p_reservation_id uuid, p_action text, p_amount bigint, p_now timestamptz
) returns table (
  outcome text, replayed boolean,
  reservation_id uuid, status text, amount bigint, committed_amount bigint, expires_at timestamptz, created_at timestamptz,
  metric text, kind text, used bigint, reserved bigint, quota_limit bigint, period_start timestamptz, period_end timestamptz,
  requested bigint, original jsonb
) language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_sub_id uuid; v_tier_id uuid;
  v_res public.usage_reservations;
  v_used bigint;
  v_outcome text; v_replayed boolean := false; v_original jsonb;
begin
  if p_action is null or p_action not in ('commit', 'release', 'read') then
    raise exception 'unknown reservation action %', p_action using errcode = '22023';
  end if;
  if p_action = 'commit' and (p_amount is null or p_amount < 0) then
    raise exception 'a commit needs an amount >= 0' using errcode = '22023';
  end if;

  select s.id, s.tier_id into v_sub_id, v_tier_id
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and s.status in ('active', 'past_due')
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  -- only a reservation of this very subscription: another user's, or another agent's, is not found
  select * into v_res from public.usage_reservations r where r.id = p_reservation_id and r.subscription_id = v_sub_id;
  if not found then
    return query select 'reservation_not_found'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  if v_res.status = 'held' then
    if p_action <> 'read' then
      -- lock order: the counter, then the hold; then look again, another call may have settled it meanwhile
      perform public.metering_counter_for_update(v_res.subscription_id, v_res.metric_id, v_res.counter_key, p_now);
      select * into v_res from public.usage_reservations r where r.id = p_reservation_id for update;
    end if;
    if v_res.status = 'held' and v_res.expires_at <= p_now then
      perform public.metering_settle_expired(array[v_res.id], p_now);
      v_res.status := 'expired';
    end if;
  end if;

  if p_action = 'read' then
    v_outcome := 'ok';
  elsif v_res.status = 'held' then
    if p_action = 'commit' and p_amount > v_res.amount then
      v_outcome := 'amount_over_hold';
    elsif p_action = 'commit' then
      update public.usage_counters c set used = c.used + p_amount, updated_at = p_now
      where c.subscription_id = v_res.subscription_id and c.metric_id = v_res.metric_id and c.period_start = v_res.counter_key
      returning c.used into v_used;
      update public.usage_reservations r set status = 'committed', committed_amount = p_amount, settled_at = p_now
      where r.id = v_res.id;
      insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                       period_start, period_end, details, created_at)
      values (public.quota_ledger_id(p_now), v_res.subscription_id, v_res.metric_id, 'committed', p_amount, p_amount, v_used,
              public.metering_live_holds(v_res.subscription_id, v_res.metric_id, v_res.counter_key, p_now),
              public.metering_effective_limit(v_sub_id, v_tier_id, v_res.metric_id, v_res.counter_key),
              v_res.period_start, v_res.period_end,
              jsonb_build_object('reservationId', v_res.id, 'held', v_res.amount), p_now);
      v_outcome := 'ok';
    else
      update public.usage_reservations r set status = 'released', settled_at = p_now where r.id = v_res.id;
      insert into public.quota_ledger (id, subscription_id, metric_id, event, amount, delta, used, reserved, quota_limit,
                                       period_start, period_end, details, created_at)
      select public.quota_ledger_id(p_now), v_res.subscription_id, v_res.metric_id, 'released', v_res.amount, 0, coalesce(c.used, 0),
             public.metering_live_holds(v_res.subscription_id, v_res.metric_id, v_res.counter_key, p_now),
             public.metering_effective_limit(v_sub_id, v_tier_id, v_res.metric_id, v_res.counter_key),
             v_res.period_start, v_res.period_end, jsonb_build_object('reservationId', v_res.id), p_now
      from (select 1) one
      left join public.usage_counters c
        on c.subscription_id = v_res.subscription_id and c.metric_id = v_res.metric_id and c.period_start = v_res.counter_key;
      v_outcome := 'ok';
    end if;
  elsif v_res.status = 'expired' then
    v_outcome := 'expired';
  elsif p_action = 'commit' and v_res.status = 'committed' then
    if v_res.committed_amount = p_amount then
      v_outcome := 'ok'; v_replayed := true;
    else
      v_outcome := 'idempotency_conflict';
      v_original := jsonb_build_object('operation', 'commit', 'amount', v_res.committed_amount);
    end if;
  elsif p_action = 'release' and v_res.status = 'released' then
    v_outcome := 'ok'; v_replayed := true;
  else
    v_outcome := 'invalid_state';
  end if;

  return query select v_outcome, v_replayed, s.*, case when p_action = 'commit' then p_amount end, v_original
               from public.metering_reservation_state(v_res.id, p_now) s;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- The caller check of usage writes, once: public.bearer_caller (user, revocation, ban, client -> token agent), then
-- the trust boundary of usage writes: only the path agent's own client (a token of another agent, or the
-- first-party client, is 'other_agent' -> 403). Both bearer statements below start with it.
-- ---------------------------------------------------------------------------------------------------------
create function public.usage_writer(
  p_user_id text, p_token_keys text[], p_issued_at timestamptz, p_now timestamptz,
  p_client_id text, p_token_agent_id uuid, p_agent_id uuid
) returns table (status text, email text, name text, role text, created_at timestamptz)
language plpgsql stable as $$
declare
  v_caller record;
  v_status text;
begin
  select * into v_caller from public.bearer_caller(p_user_id, p_token_keys, p_issued_at, p_now, p_client_id, p_token_agent_id);
  v_status := v_caller.status;
  if v_status = 'ok' and p_token_agent_id is distinct from p_agent_id then
    v_status := 'other_agent';
  end if;
  return query select v_status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at;
end
$$;

-- Increment or decrement as the holder of a bearer token, in one statement (as in 20261123000100, with the new
-- result columns). caller_status other than 'ok' means nothing was counted (outcome is then null).
drop function public.metering_call_as_bearer(text, text, text[], timestamptz, text, uuid, uuid, text, text, bigint, timestamptz);
create function public.metering_call_as_bearer(
  p_operation text, p_user_id text, p_token_keys text[], p_issued_at timestamptz,
  p_client_id text, p_token_agent_id uuid,
  p_agent_id uuid, p_metric_slug text, p_client_req_id text, p_amount bigint, p_now timestamptz
) returns table (
  caller_status text, caller_email text, caller_name text, caller_role text, caller_created_at timestamptz,
  outcome text, replayed boolean, kind text, used bigint, quota_limit bigint,
  period_start timestamptz, period_end timestamptz, requested bigint, reserved bigint, original jsonb
) language plpgsql volatile as $$
declare
  v_caller record;
begin
  select * into v_caller from public.usage_writer(p_user_id, p_token_keys, p_issued_at, p_now, p_client_id, p_token_agent_id, p_agent_id);
  if v_caller.status <> 'ok' then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at,
                        null::text, null::boolean, null::text, null::bigint, null::bigint,
                        null::timestamptz, null::timestamptz, null::bigint, null::bigint, null::jsonb;
    return;
  end if;
  if p_operation = 'increment' then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_increment(p_user_id, p_agent_id, p_metric_slug, p_client_req_id, p_amount, p_now) m;
  elsif p_operation = 'decrement' then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_decrement(p_user_id, p_agent_id, p_metric_slug, p_client_req_id, p_amount, p_now) m;
  else
    raise exception 'unknown metering operation %', p_operation using errcode = '22023';
  end if;
end
$$;

-- Reserve, commit, release or read a reservation as the holder of a bearer token, in one statement: the same
-- caller check as increments (public.usage_writer), then the reservation call. caller_status other than 'ok' means
-- nothing was done (outcome is then null).
create function public.metering_reservation_as_bearer(
  p_operation text, p_user_id text, p_token_keys text[], p_issued_at timestamptz,
  p_client_id text, p_token_agent_id uuid,
  p_agent_id uuid, p_metric_slug text, p_reservation_id uuid, p_client_req_id text, p_amount bigint, p_ttl_seconds integer,
  p_now timestamptz
) returns table (
  caller_status text, caller_email text, caller_name text, caller_role text, caller_created_at timestamptz,
  outcome text, replayed boolean,
  reservation_id uuid, status text, amount bigint, committed_amount bigint, expires_at timestamptz, created_at timestamptz,
  metric text, kind text, used bigint, reserved bigint, quota_limit bigint, period_start timestamptz, period_end timestamptz,
  requested bigint, original jsonb
) language plpgsql volatile as $$
declare
  v_caller record;
begin
  select * into v_caller from public.usage_writer(p_user_id, p_token_keys, p_issued_at, p_now, p_client_id, p_token_agent_id, p_agent_id);
  if v_caller.status <> 'ok' then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at,
                        null::text, null::boolean, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;
  if p_operation = 'reserve' then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_reserve(p_user_id, p_agent_id, p_metric_slug, p_client_req_id, p_amount, p_ttl_seconds, p_now) m;
  elsif p_operation in ('commit', 'release', 'read') then
    return query select v_caller.status, v_caller.email, v_caller.name, v_caller.role, v_caller.created_at, m.*
                   from public.metering_settle_reservation(p_user_id, p_agent_id, p_reservation_id, p_operation, p_amount, p_now) m;
  else
    raise exception 'unknown reservation operation %', p_operation using errcode = '22023';
  end if;
end
$$;

-- Server-side only: the service calls these with its own role; the Data API's roles have no business here.
revoke execute on function public.usage_writer(text, text[], timestamptz, timestamptz, text, uuid, uuid) from public, anon, authenticated;
revoke execute on function public.metering_call_as_bearer(text, text, text[], timestamptz, text, uuid, uuid, text, text, bigint, timestamptz)
  from public, anon, authenticated;
revoke execute on function public.metering_reservation_as_bearer(text, text, text[], timestamptz, text, uuid, uuid, text, uuid, text, bigint, integer, timestamptz)
  from public, anon, authenticated;
revoke execute on function public.metering_reserve(text, uuid, text, text, bigint, integer, timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_settle_reservation(text, uuid, uuid, text, bigint, timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_expire_reservations(timestamptz, integer) from public, anon, authenticated;
revoke execute on function public.metering_settle_expired(uuid[], timestamptz) from public, anon, authenticated;
