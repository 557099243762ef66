-- Agent webhooks (contract.md revision 2, "Agent webhooks"): the marketplace tells agent backends what changed.
--
-- Three tables make an outbox:
--   webhook_endpoints   an agent's receivers (managed by platform admins), the event types each wants, its secret
--   webhook_events      one row per event, written by public.webhook_emit in the same transaction as its cause, so
--                       an event exists exactly when its cause committed (a rolled-back change sends nothing)
--   webhook_deliveries  one row per (endpoint, event): pending -> delivered, or failed after at least 24 h of
--                       retries; webhook_delivery_attempts logs every try (status code, duration, error)
-- The service's drain (functions/webhooks/drain.ts) claims due deliveries with FOR UPDATE SKIP LOCKED and sends them
-- over HTTP; nothing in a request waits for a receiver.
--
-- Order per endpoint: events are numbered by webhook_events.seq (an identity, so in insert order). Events about the
-- same subject (one subscription, one counter, one reservation) are written under that subject's row lock, so their
-- numbers follow commit order. The drain never sends a delivery while an earlier-numbered delivery to the same
-- endpoint is still pending.
--
-- Secrets: `whsec_<base64>` Standard Webhooks secrets must be usable for HMAC, so they cannot be hashed. They are
-- stored encrypted (AES-256-GCM, key derived from AUTH_SECRET by HKDF, the endpoint id as associated data; see
-- functions/webhooks/secrets.ts): a database dump, a backup or a read-only SQL role does not hand out the keys that
-- sign messages agent backends trust, and a ciphertext copied onto another endpoint does not decrypt. The API shows a
-- secret only in the answer that created it (create, rotate) and never logs it. Changing AUTH_SECRET makes the
-- stored secrets unreadable: deliveries then fail with an error saying so until the secrets are rotated.
--
-- Time: the functions take p_now (the service's injected clock). The subscription trigger cannot see that clock; it
-- uses the row's updated_at, which every writer sets from the service's clock (p_now in the SQL functions, clock.now()
-- in the services), so the event's time is the change's time in tests and in production alike. A delivery is due at
-- once ('-infinity'), so the first attempt never depends on which clock wrote the event.

create table public.webhook_endpoints (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  url text not null check (char_length(url) between 1 and 2048),
  events text[] not null check (
    cardinality(events) >= 1
    and events <@ array['subscription.created', 'subscription.updated', 'subscription.canceled',
                        'usage.threshold_reached', 'reservation.expired']::text[]),
  enabled boolean not null default true,
  -- v1.<iv>.<ciphertext> (base64url), see above
  secret_encrypted text not null,
  -- after a rotation the previous secret still signs (a second signature) until previous_secret_expires_at
  previous_secret_encrypted text,
  previous_secret_expires_at timestamptz(3),
  created_at timestamptz(3) not null,
  updated_at timestamptz(3) not null
);
create index webhook_endpoints_agent_idx on public.webhook_endpoints (agent_id, created_at desc, id desc);

create table public.webhook_events (
  id uuid primary key default gen_random_uuid(),
  seq bigint generated always as identity,
  agent_id uuid not null references public.agents (id) on delete cascade,
  type text not null check (type in ('subscription.created', 'subscription.updated', 'subscription.canceled',
                                     'usage.threshold_reached', 'reservation.expired')),
  data jsonb not null,
  occurred_at timestamptz(3) not null,
  constraint webhook_events_seq_key unique (seq)
);
create index webhook_events_agent_idx on public.webhook_events (agent_id, seq);

-- Delivery ids sort like their creation (UUIDv7 layout as public.quota_ledger_id: the time, then a sequence), so
-- deliveries made in the same millisecond still list newest first under the (created_at desc, id desc) keyset.
create sequence public.webhook_deliveries_seq;
create function public.webhook_delivery_id(p_at timestamptz) returns uuid language sql volatile as $$
  select (lpad(to_hex(greatest(0, floor(extract(epoch from p_at) * 1000))::bigint), 12, '0')
          || '7000' || '8' || lpad(to_hex(nextval('public.webhook_deliveries_seq')), 15, '0'))::uuid
$$;

create table public.webhook_deliveries (
  id uuid primary key,
  endpoint_id uuid not null references public.webhook_endpoints (id) on delete cascade,
  event_id uuid not null references public.webhook_events (id) on delete cascade,
  event_seq bigint not null,
  status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
  -- attempts in the current round (a redelivery starts a new round; the attempts table keeps every try)
  attempts integer not null default 0 check (attempts >= 0),
  next_attempt_at timestamptz(3) not null default '-infinity',
  first_attempt_at timestamptz(3),
  last_attempt_at timestamptz(3),
  delivered_at timestamptz(3),
  last_status_code integer,
  last_error text,
  -- set by the drain that claimed the delivery; only that drain may record the outcome
  claim_id uuid,
  created_at timestamptz(3) not null,
  constraint webhook_deliveries_event_key unique (endpoint_id, event_id)
);
-- the drain: due deliveries, and "is an earlier one to this endpoint still pending?"
create index webhook_deliveries_due_idx on public.webhook_deliveries (next_attempt_at, event_seq) where status = 'pending';
create index webhook_deliveries_endpoint_pending_idx on public.webhook_deliveries (endpoint_id, event_seq) where status = 'pending';
-- listWebhookDeliveries, newest first, optionally one status
create index webhook_deliveries_endpoint_created_idx on public.webhook_deliveries (endpoint_id, created_at desc, id desc);
create index webhook_deliveries_endpoint_status_idx on public.webhook_deliveries (endpoint_id, status, created_at desc, id desc);
create index webhook_deliveries_event_idx on public.webhook_deliveries (event_id);

create table public.webhook_delivery_attempts (
  id uuid primary key default gen_random_uuid(),
  delivery_id uuid not null references public.webhook_deliveries (id) on delete cascade,
  attempted_at timestamptz(3) not null,
  duration_ms integer not null check (duration_ms >= 0),
  status_code integer,
  error text
);
create index webhook_delivery_attempts_delivery_idx on public.webhook_delivery_attempts (delivery_id, attempted_at desc, id desc);

-- Thresholds of a quota reached in a period (80 and 100 %), once each: the record behind usage.threshold_reached
-- and the user's 100 % mail. period_start is the counter's key ('-infinity' for a fixed metric: once for the
-- subscription's life).
create table public.usage_threshold_notices (
  subscription_id uuid not null references public.subscriptions (id) on delete cascade,
  metric_id uuid not null references public.metric_definitions (id) on delete cascade,
  period_start timestamptz(3) not null,
  threshold smallint not null check (threshold in (80, 100)),
  used bigint not null,
  quota_limit bigint not null,
  reached_at timestamptz(3) not null,
  primary key (subscription_id, metric_id, period_start, threshold)
);

alter table public.webhook_endpoints enable row level security;
alter table public.webhook_events enable row level security;
alter table public.webhook_deliveries enable row level security;
alter table public.webhook_delivery_attempts enable row level security;
alter table public.usage_threshold_notices enable row level security;
-- No policies: only the service (table owner) reads or writes them; the Data API's roles get nothing.
revoke all on sequence public.webhook_deliveries_seq from anon, authenticated;
revoke all on public.webhook_endpoints, public.webhook_events, public.webhook_deliveries,
  public.webhook_delivery_attempts, public.usage_threshold_notices from anon, authenticated;

-- An ISO 8601 UTC timestamp with milliseconds, as the API writes them (2026-11-22T05:00:00.000Z), whatever the
-- session's TimeZone.
create function public.webhook_iso(p_at timestamptz) returns text
language sql immutable parallel safe as $$
  select to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Writes one event to the outbox and one pending delivery per enabled endpoint of the agent subscribed to its
-- type, on the caller's transaction. Returns the event id, or null when no endpoint wants it (then nothing is
-- written: agents without webhooks cost one index probe).
-- ---------------------------------------------------------------------------------------------------------
create function public.webhook_emit(p_agent_id uuid, p_type text, p_data jsonb, p_now timestamptz)
returns uuid
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_event_id uuid;
  v_seq bigint;
begin
  if p_type is null or p_type not in ('subscription.created', 'subscription.updated', 'subscription.canceled',
                                      'usage.threshold_reached', 'reservation.expired') then
    raise exception 'unknown webhook event type %', p_type using errcode = '22023';
  end if;
  if p_agent_id is null or not exists (
    select 1 from public.webhook_endpoints e where e.agent_id = p_agent_id and e.enabled and p_type = any (e.events)
  ) then
    return null;
  end if;
  insert into public.webhook_events (agent_id, type, data, occurred_at)
  values (p_agent_id, p_type, coalesce(p_data, '{}'::jsonb), coalesce(p_now, now()))
  returning id, seq into v_event_id, v_seq;
  insert into public.webhook_deliveries (id, endpoint_id, event_id, event_seq, created_at)
  select public.webhook_delivery_id(coalesce(p_now, now())), e.id, v_event_id, v_seq, coalesce(p_now, now())
  from public.webhook_endpoints e
  where e.agent_id = p_agent_id and e.enabled and p_type = any (e.events);
  return v_event_id;
end
$$;

-- ---------------------------------------------------------------------------------------------------------
-- Subscription events, from the table itself: every writer (free checkout, the Stripe state upsert
-- billing_apply_stripe_subscription, tier changes, admin cancel, cancel on ban) emits without knowing it, in its
-- own transaction. Data: the subscription as the API shows it, plus canceledAt, plus `previous` (the changed fields'
-- old values) on updated and canceled. Time: the row's updated_at (see the header).
-- ---------------------------------------------------------------------------------------------------------
create function public.webhook_subscription_data(s public.subscriptions) returns jsonb
language sql stable
set search_path = public, pg_temp
as $$
  select jsonb_build_object(
    'id', s.id,
    'userId', s.user_id,
    'agentId', s.agent_id,
    'tierId', s.tier_id,
    'status', s.status,
    'currentPeriodStart', public.webhook_iso(b.period_start),
    'currentPeriodEnd', public.webhook_iso(b.period_end),
    'cancelAtPeriodEnd', s.cancel_at_period_end,
    'canceledAt', public.webhook_iso(s.canceled_at),
    'pendingTierId', s.pending_tier_id,
    'pendingChangeKind', s.pending_change_kind,
    'createdAt', public.webhook_iso(s.created_at))
  from public.billing_period(s.current_period_start, s.current_period_end, s.stripe_subscription_id is null,
                             s.updated_at) b
$$;

create function public.webhook_subscription_changed() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_previous jsonb := '{}'::jsonb;
  v_data jsonb;
begin
  v_data := public.webhook_subscription_data(new);
  if tg_op = 'INSERT' then
    perform public.webhook_emit(new.agent_id, 'subscription.created', v_data, new.updated_at);
    if new.status = 'canceled' then
      perform public.webhook_emit(new.agent_id, 'subscription.canceled', v_data, new.updated_at);
    end if;
    return null;
  end if;

  if new.tier_id is distinct from old.tier_id then
    v_previous := v_previous || jsonb_build_object('tierId', old.tier_id);
  end if;
  if new.status is distinct from old.status then
    v_previous := v_previous || jsonb_build_object('status', old.status);
  end if;
  if new.pending_tier_id is distinct from old.pending_tier_id or new.pending_change_kind is distinct from old.pending_change_kind then
    v_previous := v_previous || jsonb_build_object('pendingTierId', old.pending_tier_id, 'pendingChangeKind', old.pending_change_kind);
  end if;
  if new.cancel_at_period_end is distinct from old.cancel_at_period_end then
    v_previous := v_previous || jsonb_build_object('cancelAtPeriodEnd', old.cancel_at_period_end);
  end if;
  if v_previous = '{}'::jsonb then
    return null;
  end if;
  perform public.webhook_emit(
    new.agent_id,
    case when new.status = 'canceled' and old.status <> 'canceled' then 'subscription.canceled' else 'subscription.updated' end,
    v_data || jsonb_build_object('previous', v_previous),
    new.updated_at);
  return null;
end
$$;

create trigger subscriptions_webhook_created after insert on public.subscriptions
  for each row execute function public.webhook_subscription_changed();
create trigger subscriptions_webhook_updated
  after update of tier_id, status, pending_tier_id, pending_change_kind, cancel_at_period_end on public.subscriptions
  for each row execute function public.webhook_subscription_changed();

-- ---------------------------------------------------------------------------------------------------------
-- Quota thresholds. The metering functions call this after a change that can raise usage, with p_used = used +
-- live holds of the counter and p_limit = the effective limit, on the same transaction (under the counter's lock).
-- The first time in a period that usage reaches 80 % or 100 % of a positive limit, it records the threshold, emits
-- usage.threshold_reached { subscriptionId, userId, metric, threshold, used, limit, periodStart } and, at 100 %,
-- queues one mail to the user (mail_outbox, delivered by the mail drain). A jump past both emits 80 then 100.
-- Returns the thresholds reached by this call (empty when none).
-- periodStart is the counter's period; for a fixed metric (key '-infinity') the subscription's start, as the
-- usage record shows it.
-- ---------------------------------------------------------------------------------------------------------
create function public.metering_note_threshold(
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
  v_data jsonb;
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

  select s.id, s.user_id, s.agent_id, s.created_at, a.name as agent_name
    into v_sub
  from public.subscriptions s join public.agents a on a.id = s.agent_id
  where s.id = p_subscription_id;
  select m.slug, m.name, m.unit into v_metric from public.metric_definitions m where m.id = p_metric_id;
  v_period_start := case when isfinite(p_period_start) then p_period_start else v_sub.created_at end;

  foreach v_threshold in array v_reached loop
    v_data := jsonb_build_object(
      'subscriptionId', v_sub.id,
      'userId', v_sub.user_id,
      'metric', v_metric.slug,
      'threshold', v_threshold,
      'used', p_used,
      'limit', p_limit,
      'periodStart', public.webhook_iso(v_period_start));
    perform public.webhook_emit(v_sub.agent_id, 'usage.threshold_reached', v_data, p_now);
    if v_threshold = 100 then
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
    end if;
  end loop;
  return v_reached;
end
$$;

-- Server-side only: the service (table owner) calls these; the Data API's roles have no business here.
revoke execute on function public.webhook_emit(uuid, text, jsonb, timestamptz) from public, anon, authenticated;
revoke execute on function public.webhook_delivery_id(timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_note_threshold(uuid, uuid, timestamptz, bigint, bigint, timestamptz)
  from public, anon, authenticated;
revoke execute on function public.webhook_subscription_data(public.subscriptions) from public, anon, authenticated;
revoke execute on function public.webhook_subscription_changed() from public, anon, authenticated;
