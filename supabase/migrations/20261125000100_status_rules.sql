-- Two catalog and billing rules get one definition each (issue 13): "published agent" (listed in the catalog:
-- active or coming soon) and "a subscription that grants access" (active, or past due while Stripe retries).
-- Until now each was a literal status list, written in 9 policies, 7 views, 4 metering functions and the service's
-- queries; a change to either rule had to find every copy. Now every policy, view, function and query calls the
-- predicate, and the TypeScript constants (catalog/agents.ts PUBLISHED, billing/subscriptions.ts ACTIVE_STATUSES)
-- are checked against it by tests/foundation/status-rules.test.ts.
--
-- Both are `language sql immutable` with a single expression and no SET clause, so the planner inlines them: a
-- policy or view using them plans exactly as the literal did (an index on status stays usable). They read no table,
-- so the missing `set search_path` cannot be abused (`in` over text resolves in pg_catalog first).

create function public.agent_is_published(p_status text) returns boolean
  language sql immutable parallel safe
  as $$ select p_status in ('active', 'coming_soon') $$;

create function public.subscription_grants_access(p_status text) returns boolean
  language sql immutable parallel safe
  as $$ select p_status in ('active', 'past_due') $$;

-- Policies (20261122000100_core.sql, 20261122000400_catalog.sql): same rules, through the predicate.
alter policy agents_public_read on public.agents using (public.agent_is_published(status));
alter policy tiers_public_read on public.tiers
  using (is_public and exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));
alter policy metric_definitions_public_read on public.metric_definitions
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));
alter policy agent_capabilities_public_read on public.agent_capabilities
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));
alter policy agent_steps_public_read on public.agent_steps
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));
alter policy agent_changelog_entries_public_read on public.agent_changelog_entries
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));
alter policy agent_videos_public_read on public.agent_videos
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));
alter policy agent_tags_public_read on public.agent_tags
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));
alter policy reviews_public_read on public.reviews
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status)));

-- Public catalog views (20261122000400_catalog.sql): same columns, same security_invoker, the where clause through
-- the predicate.
create or replace view public.catalog_agents with (security_invoker = true) as
  select a.id, a.slug, a.name, a.description, a.long_description, a.status, a.installs, a.created_at, a.updated_at,
         coalesce(r.review_count, 0) as review_count, r.average_rating,
         coalesce(tg.tags, '{}') as tags
  from public.agents a
  left join lateral (
    select count(*)::integer as review_count, round(avg(rating)::numeric, 2) as average_rating
    from public.reviews where agent_id = a.id
  ) r on true
  left join lateral (
    select array_agg(t.slug order by t.slug) as tags
    from public.agent_tags at join public.tags t on t.id = at.tag_id where at.agent_id = a.id
  ) tg on true
  where public.agent_is_published(a.status);

create or replace view public.catalog_tiers with (security_invoker = true) as
  select t.id, t.agent_id, t.name, t.price_cents, t.currency, t.interval, t.features, t.created_at
  from public.tiers t join public.agents a on a.id = t.agent_id
  where t.is_public and public.agent_is_published(a.status);

create or replace view public.catalog_capabilities with (security_invoker = true) as
  select c.id, c.agent_id, c.position, c.title, c.description
  from public.agent_capabilities c join public.agents a on a.id = c.agent_id
  where public.agent_is_published(a.status);

create or replace view public.catalog_steps with (security_invoker = true) as
  select s.id, s.agent_id, s.position, s.title, s.description
  from public.agent_steps s join public.agents a on a.id = s.agent_id
  where public.agent_is_published(a.status);

create or replace view public.catalog_changelog with (security_invoker = true) as
  select e.id, e.agent_id, e.version, e.title, e.body, e.created_at
  from public.agent_changelog_entries e join public.agents a on a.id = e.agent_id
  where public.agent_is_published(a.status);

create or replace view public.catalog_videos with (security_invoker = true) as
  select v.id, v.agent_id, v.url, v.title, v.created_at
  from public.agent_videos v join public.agents a on a.id = v.agent_id
  where public.agent_is_published(a.status);

create or replace view public.catalog_reviews with (security_invoker = true) as
  select r.id, r.agent_id, r.user_id, r.rating, r.title, r.body, r.created_at, r.updated_at
  from public.reviews r join public.agents a on a.id = r.agent_id
  where public.agent_is_published(a.status);

-- The four metering functions that find the caller's subscription (20261123000500_reservations.sql), unchanged but
-- for that lookup, which now says what it means. create or replace keeps their owner and privileges.
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
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at, s.current_period_start, s.current_period_end, s.stripe_subscription_id is null
    into v_sub_id, v_tier_id, v_created, v_anchor, v_stored_end, v_computed
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
begin
  if p_amount is null or p_amount < 1 then
    raise exception 'amount must be a positive integer' using errcode = '22023';
  end if;

  select s.id, s.tier_id, s.created_at into v_sub_id, v_tier_id, v_created
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

create or replace function public.metering_reserve(
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
  where s.user_id = p_user_id and s.agent_id = p_agent_id and public.subscription_grants_access(s.status)
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

