-- Functions that write are the service's, never the Data API's. These seven were still EXECUTE-able by PUBLIC (so by
-- anon and authenticated through PostgREST's /rpc): they run as the invoker, so the table privileges those roles lack
-- already stopped them, but an RPC surface nobody should call is closed rather than left to a second rule.
-- The rule, checked by tests/foundation/function-privileges.test.ts: no volatile function of the public schema (other
-- than triggers) is executable by anon or authenticated.
revoke execute on function public.quota_ledger_id(timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_lock_counters(uuid[], uuid, timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_record_events(uuid[], uuid, text, bigint, uuid, text, jsonb, timestamptz)
  from public, anon, authenticated;
revoke execute on function public.metering_counter_for_update(uuid, uuid, timestamptz, timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_increment(text, uuid, text, text, bigint, timestamptz) from public, anon, authenticated;
revoke execute on function public.metering_decrement(text, uuid, text, text, bigint, timestamptz) from public, anon, authenticated;
revoke execute on function public.billing_claim_purchase(text, text, text, timestamptz) from public, anon, authenticated;
