-- Review 31 (agent webhooks): two mends.
--
-- 1. Every secret a rotation replaced keeps signing for 24 hours after it was replaced. There was one "previous
--    secret" column, and a second rotation within the day overwrote it: the receiver still verifying with the
--    original secret (the new one not deployed yet, or never received: a double click, each answer shown once) got
--    "No matching signature found" on every delivery at once, against docs/webhooks.md. Now the replaced secrets are a
--    list, each with the moment it stops signing, newest first, at most the 3 latest (a header of at most four
--    signatures); expired ones are dropped at the next rotation and never used by the drain
--    (functions/webhooks/endpoints.ts rotateWebhookSecret, functions/webhooks/drain.ts signingSecrets).
alter table public.webhook_endpoints add column earlier_secrets jsonb not null default '[]'::jsonb;
update public.webhook_endpoints
   set earlier_secrets = jsonb_build_array(jsonb_build_object('secret', previous_secret_encrypted, 'until', previous_secret_expires_at))
 where previous_secret_encrypted is not null and previous_secret_expires_at > now();
alter table public.webhook_endpoints drop column previous_secret_encrypted, drop column previous_secret_expires_at;

-- 2. Recording an attempt fails the deliveries waiting behind it whose time is over (functions/webhooks/drain.ts, the
--    `behind` step). Its predicate (webhook_retries_over, webhook_delivery_outlived) could use no index, so each attempt
--    read every pending delivery of its endpoint: with 100,000 waiting behind an endpoint back from an outage, 278 ms
--    per attempt against 8 ms with none (review 31), a backlog of n costing the database O(n^2), the endpoint falling
--    to about 3 deliveries a second. Both rules imply the delivery was queued at or before the attempt's cutoff (the
--    attempt's time less 24 hours); the drain now says so, and this index finds exactly those.
create index webhook_deliveries_endpoint_queued_idx on public.webhook_deliveries (endpoint_id, (coalesce(redelivered_at, created_at)))
  where status = 'pending';
