-- A restart (cancel, start again) carried each counter to the new subscription stamped with the restart's own time, and
-- moved every hold live at that time (review 39). A restart whose time was read just before a hold expired, run after
-- an increment that came just after the expiry and took the hold's units, forgot that later time: a late commit of the
-- hold, arriving before the expiry, found it live on the new counter and counted it beside the increment, past the
-- limit (rule 21 held within a subscription, not across a restart). Now the carried counter keeps its time (the later
-- of its own and the restart's), and a hold moves only when it is live at that time; one that is not stays on the old
-- subscription, where its late commit answers 422 INVALID_STATE as without the restart.
--
-- The left-behind hold is answered as an expired one on the subscriptions the new one continues
-- (metering_settle_reservation: past its expiry at its counter's latest time, not only at the call's).
--
-- The functions of 20261127000500 and 20261127000100, with those changes.

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
    select new.id, c.metric_id, c.period_start, c.used, greatest(v_at, c.updated_at) -- its time too (added in 20261127004900)
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
    where m.id = r.metric_id and r.subscription_id = v_prev.id and r.status = 'held'
      -- live at the counter's latest time, not only at the restart's: a call after the expiry took its units
      -- (added in 20261127004900)
      and r.expires_at > greatest(v_at, coalesce((select oc.updated_at from public.usage_counters oc
                                                   where oc.subscription_id = v_prev.id and oc.metric_id = r.metric_id
                                                     and oc.period_start = r.counter_key), v_at))
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

create or replace function public.metering_settle_reservation(
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
  v_seen timestamptz := p_now;
  v_outcome text; v_replayed boolean := false; v_original jsonb;
  v_continued_from uuid; -- (changed in 20261126002700)
begin
  if p_action is null or p_action not in ('commit', 'release', 'read') then
    raise exception 'unknown reservation action %', p_action using errcode = '22023';
  end if;
  if p_action = 'commit' and (p_amount is null or p_amount < 0) then
    raise exception 'a commit needs an amount >= 0' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.continued_from into v_sub_id, v_tier_id, v_continued_from -- (changed in 20261126002700)
  from public.subscriptions s
  where s.user_id = p_user_id and s.agent_id = p_agent_id and public.subscription_grants_access(s.status)
  limit 1;
  if v_sub_id is null then
    return query select 'subscription_required'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  -- only a reservation of this very subscription: another user's, or another agent's, is not found
  select * into v_res from public.usage_reservations r where r.id = p_reservation_id and r.subscription_id = v_sub_id;
  -- or one no longer live on a subscription this one continued: a retry after a restart is a replay (its live holds
  -- moved here; one still marked held there ran out before the restart and counts nowhere). Read only: nothing below
  -- writes it, its status here is never 'held' (changed in 20261126002700, to the end if)
  if not found and v_continued_from is not null then
    select * into v_res from public.usage_reservations r
    -- past its expiry at its counter's latest time: a hold a restart left behind because a later call there had taken
    -- its units (added in 20261127004900)
    where r.id = p_reservation_id
      and (r.status <> 'held'
           or r.expires_at <= greatest(p_now, (select c.updated_at from public.usage_counters c
                                                where c.subscription_id = r.subscription_id and c.metric_id = r.metric_id
                                                  and c.period_start = r.counter_key)))
      and r.subscription_id in (
        select c.subscription_id from public.subscription_continued_chain(v_continued_from) c); -- (changed in 20261127000100)
    if found and v_res.status = 'held' then
      v_res.status := 'expired';
    end if;
  end if;
  if v_res.id is null then -- (changed in 20261126002700)
    return query select 'reservation_not_found'::text, false, null::uuid, null::text, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::text, null::text, null::bigint, null::bigint, null::bigint, null::timestamptz,
                        null::timestamptz, null::bigint, null::jsonb;
    return;
  end if;

  if v_res.status = 'held' then
    -- a read writes only to settle an expired hold; then it takes the locks in the same order
    if p_action <> 'read' or v_res.expires_at <= p_now then
      -- lock order: the counter, then the hold; then look again, another call may have settled it meanwhile
      perform public.metering_counter_for_update(v_res.subscription_id, v_res.metric_id, v_res.counter_key, p_now);
      select * into v_res from public.usage_reservations r where r.id = p_reservation_id for update;
      -- time never goes back on a counter: a write to it at a later time has already treated the hold as expired
      -- (changed in 20261126000400)
      select greatest(p_now, c.updated_at) into v_seen from public.usage_counters c
      where c.subscription_id = v_res.subscription_id and c.metric_id = v_res.metric_id and c.period_start = v_res.counter_key;
    end if;
    if v_res.status = 'held' and v_res.expires_at <= v_seen then
      perform public.metering_settle_expired(array[v_res.id], v_seen);
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
