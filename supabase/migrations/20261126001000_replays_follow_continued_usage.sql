-- A retry of a usage call after a restart is a replay, not a second count (found by a hostile review).
--
-- Usage continues across a cancel-and-restart (20261126000300, 20261126000500): the counters and the live holds move
-- to the new subscription, but the ledger rows of the increments and decrements, which are their idempotency records,
-- stay with the old one. So an agent retrying an increment whose answer it lost (the same clientReqId), after the user
-- canceled and started again, was counted a second time on the new subscription: charged twice, against the
-- contract's "a replay of the same clientReqId returns the first call's result and changes nothing".
--
-- Now a subscription records the one it continued (subscriptions.continued_from, set where usage continues), and an
-- increment or decrement looks its clientReqId up on its subscription and then along that chain
-- (public.metering_continued_entry): a call already recorded on a subscription this one continued answers its stored
-- result, replayed. The common case costs nothing more: the chain is walked only when the key is not on the
-- subscription itself and the subscription continued another. (After losing a race for the key on its own
-- subscription, a call reads only that subscription again: the winner wrote there.) A reserve keeps
-- its own subscription's lookup: its live holds move with their ledger rows, and a reserve retried after a restart
-- makes a new hold, which counts nothing until the agent commits it by its id.
-- metering_increment, metering_decrement and subscription_continue_usage are restated whole from 20261125000100 and
-- 20261126000500 with only these changes (marked).

alter table public.subscriptions add column continued_from uuid references public.subscriptions (id) on delete set null;

-- The ledger row recorded for (metric, clientReqId) on the nearest of the subscriptions a subscription continued,
-- starting from the one it continued directly. PL/pgSQL, so its statement is planned once per session (20261125000500).
create function public.metering_continued_entry(p_metric_id uuid, p_continued_from uuid, p_client_req_id text)
returns setof public.quota_ledger
language plpgsql stable
set search_path = public, pg_temp
as $$
begin
  -- (union, not union all, and a depth bound: a chain never loops, and if one did the walk would still end)
  return query
    with recursive chain (id, continued_from, depth) as (
      select s.id, s.continued_from, 1 from public.subscriptions s where s.id = p_continued_from
      union
      select s.id, s.continued_from, c.depth + 1 from chain c join public.subscriptions s on s.id = c.continued_from
       where c.depth < 100
    )
    select l.* from chain c
    join public.quota_ledger l on l.metric_id = p_metric_id and l.subscription_id = c.id and l.client_req_id = p_client_req_id
    order by c.depth
    limit 1;
end
$$;

create or replace function public.metering_increment(
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
  v_continued_from uuid; -- (changed in 20261126001000)
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at, s.current_period_start, s.current_period_end, s.stripe_subscription_id is null,
         s.continued_from -- (changed in 20261126001000)
    into v_sub_id, v_tier_id, v_created, v_anchor, v_stored_end, v_computed, v_continued_from
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and public.subscription_grants_access(s.status)
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
  -- and on the subscriptions this one continued: a retry after a restart is a replay -- (changed in 20261126001000)
  if not found and v_continued_from is not null then
    select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
    from public.metering_continued_entry(v_metric_id, v_continued_from, p_client_req_id) l;
  end if;

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

create or replace function public.metering_decrement(
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
  v_continued_from uuid; -- (changed in 20261126001000)
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at, s.continued_from into v_sub_id, v_tier_id, v_created, v_continued_from -- (changed in 20261126001000)
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and public.subscription_grants_access(s.status)
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
    -- and on the subscriptions this one continued: a retry after a restart is a replay -- (changed in 20261126001000)
    if not found and v_continued_from is not null then
      select l.event, l.used, l.reserved, l.quota_limit, l.period_start, l.period_end, l.amount, l.details into v_prev
      from public.metering_continued_entry(v_metric_id, v_continued_from, p_client_req_id) l;
    end if;
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

revoke execute on function public.metering_continued_entry(uuid, uuid, text) from public, anon, authenticated;
