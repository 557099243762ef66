-- Waits that had no bound, found by the review of faults across many instances (review 31). Each part says what
-- it fixes; functions/platform/db.ts bounds the rest (statement_timeout, idle_in_transaction_session_timeout and a
-- reply deadline on every pooled connection: docs/operations.md).

-- ---------------------------------------------------------------------------------------------------------------
-- 1. A usage batch waits at most 2 s for a counter lock.
--
-- The group commit (functions/metering/group-commit.ts) keeps two batches in flight per instance, each one call of
-- this function. A call whose counter another transaction holds (a quota-lowering change takes the counter locks
-- with public.metering_lock_counters, in a transaction of several round trips) waited inside PostgreSQL with its
-- whole batch; two such calls took both slots, and every usage call of the instance, for every agent and user,
-- queued behind that one lock. Now the wait ends after lock_timeout with 55P03: the batch group-commit.ts gets back
-- is retried call by call, so the others are answered and only the call on the held counter gets 503 UNAVAILABLE
-- (retryable: its clientReqId makes a retry count once).
--
-- A SET clause of the function, not a statement per batch: no round trip more on the hot path, and the setting
-- holds for this call only. 2 s is far above a legitimate wait here (the other batch in flight on the same counter
-- commits within milliseconds; deadlock_timeout, 1 s, still comes first). A later `create or replace` of this
-- function must repeat the clause (tests/metering/group-commit-lock-wait.pg-only.test.ts checks it).
alter function public.metering_batch_as_bearer(text[], text[], text[], timestamptz[], text[], uuid[], uuid[], text[],
                                               text[], bigint[], timestamptz[], uuid[], integer[])
  set lock_timeout = '2s';

-- ---------------------------------------------------------------------------------------------------------------
-- 2. Who holds counter locks holds them only while working.
--
-- The locks above are taken by admin changes (revoking an addon, cutting or removing a tier quota) that go on with
-- more statements after this call. A service process that stalls between two of them (a long GC pause, a frozen
-- container, a network partition) kept the counters locked for as long as it stalled. The transaction that takes
-- them now ends (the server closes its session, releasing the locks) when it sits idle for 5 s; the service sees a
-- lost connection and answers 503. Body unchanged otherwise (20261122000500).
create or replace function public.metering_lock_counters(p_subscription_ids uuid[], p_metric_id uuid, p_now timestamptz)
returns void language plpgsql volatile as $$
begin
  -- transaction-local (is_local = true): it holds until this transaction ends, and for this transaction only
  perform set_config('idle_in_transaction_session_timeout', '5s', true);
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
revoke execute on function public.metering_lock_counters(uuid[], uuid, timestamptz) from public, anon, authenticated;

-- ---------------------------------------------------------------------------------------------------------------
-- 3. Rate limits and the housekeeping no longer deadlock.
--
-- public.rate_limit_hit deleted up to 16 windows that had ended over a minute ago (skip locked: it held them) and
-- then upserted its own key; public.rate_limit_prune, in the scheduled housekeeping, deleted every ended window in
-- scan order, waiting for any row it could not take. A client back after its window ended (the common case) waited
-- for the housekeeping, which held its key, while the housekeeping waited for a row the client's delete held: a
-- deadlock (40P01), ended by PostgreSQL after deadlock_timeout, and either the request answered 500 or the whole
-- housekeeping run rolled back (and POST /internal/drain with it, before sending any mail).
--
-- Now neither waits while it holds a row of the table:
--   - rate_limit_hit takes its own key first, while it holds nothing, and only then deletes a few ended windows of
--     other keys, skipping rows another transaction holds;
--   - rate_limit_prune deletes only the ended windows nobody holds (skip locked, in key order); a window held by a
--     check right now is pruned by the next run, or reset by that check.
create or replace function public.rate_limit_hit(p_key text, p_limit integer, p_window_ms integer, p_now timestamptz)
returns table (allowed boolean, retry_after_ms bigint)
language plpgsql as $$
declare
  v_end timestamptz;
  v_allowed boolean;
begin
  insert into public.rate_limits as r (key, window_start, window_end, hits)
  values (p_key, p_now, p_now + p_window_ms * interval '1 millisecond', 1)
  on conflict (key) do update
     set hits = case when r.window_end <= p_now then 1 else r.hits + 1 end,
         window_start = case when r.window_end <= p_now then p_now else r.window_start end,
         window_end = case when r.window_end <= p_now then p_now + p_window_ms * interval '1 millisecond' else r.window_end end
   where r.window_end <= p_now or r.hits < p_limit
  returning r.window_end into v_end;
  v_allowed := found;
  if not v_allowed then
    select r.window_end into v_end from public.rate_limits r where r.key = p_key;
  end if;

  -- Never waits: rows another transaction holds are skipped (this key's own row, ours, ends in the future).
  delete from public.rate_limits
   where key in (select r.key from public.rate_limits r
                  where r.window_end < p_now - interval '1 minute'
                  order by r.window_end limit 16 for update skip locked);

  if v_allowed then
    return query select true, 0::bigint;
  else
    return query select false, greatest(1, ceil(extract(epoch from (v_end - p_now)) * 1000))::bigint;
  end if;
end
$$;

-- Removes every ended window that no other transaction holds; returns how many. For the housekeeping (pg_cron,
-- POST /internal/drain) or an operator (`select public.rate_limit_prune(now())`).
create or replace function public.rate_limit_prune(p_now timestamptz) returns integer
language sql as $$
  with gone as (
    delete from public.rate_limits
     where key in (select r.key from public.rate_limits r
                    where r.window_end < p_now
                    order by r.key
                    for update skip locked)
    returning 1)
  select count(*)::integer from gone
$$;

revoke execute on function public.rate_limit_hit(text, integer, integer, timestamptz) from public, anon, authenticated;
revoke execute on function public.rate_limit_prune(timestamptz) from public, anon, authenticated;

-- ---------------------------------------------------------------------------------------------------------------
-- 4. A mail's claim names its holder.
--
-- functions/platform/mailer.ts leases a claimed mail for 120 s. A send that outlived the lease (a mail server
-- answering at a trickle) let another instance claim and send the mail again, and the first send's failure, recorded
-- later, put the mail back to `pending` over the other's `sent` (a third send). Each claim now writes its own
-- claim_id; the holder's failure and hand-back only apply while the row still carries it (as webhook_deliveries'
-- claim_id, 20261123000600), and recording `sent` clears it. The mailer also bounds a whole send well under the lease.
alter table public.mail_outbox add column claim_id uuid;
