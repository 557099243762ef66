-- Review 85: three gaps left by 20261127006100.
--
-- 1. A customer deleted at Stripe is remembered as deleted for good (billing_deleted_customers). The user's link row
--    keeps only the customer it names now, so once billing_forget_customer had moved a link from A to the customer B of
--    another subscription, and B was deleted too (both events late), forgetting B moved the link straight back to A:
--    each paid checkout named the other dead customer and answered 422 "No such customer" for as long as the events
--    stayed away. Now neither the move nor billing_link_customer ever links a customer Stripe deleted.
-- 2. The renewal trigger dropped the round's mark only while the agent was 'inactive'. A restore resumes only agents
--    that are 'active' again (functions/billing/deleted-agents.ts, toResume), so an agent brought back as 'draft' or
--    'coming_soon' kept the mark through the user's renewal and second cancel, and going 'active' then undid that
--    cancel. The trigger now acts whenever the agent is not 'active', the resume's own condition.
-- 3. An agent's OAuth client carries the agent's name (the consent page shows it). Renames follow since 20261127006100
--    (functions/auth/agent-clients.ts, renameAgentClient), but clients of agents renamed before it, and of agents whose
--    names 20261127005900 rewrote (line breaks, direction overrides), kept the old name: set once here.

create table public.billing_deleted_customers (
  stripe_customer_id text primary key,
  deleted_at timestamptz(3) not null
);
alter table public.billing_deleted_customers enable row level security;
revoke all on public.billing_deleted_customers from anon, authenticated;
-- No policies: only the service (table owner) reads or writes it.

-- the customers already known to be deleted (their users' links say so)
insert into public.billing_deleted_customers (stripe_customer_id, deleted_at)
select stripe_customer_id, deleted_at from public.billing_customers where deleted_at is not null
on conflict do nothing;

create or replace function public.billing_link_customer(p_user_id text, p_customer_id text, p_now timestamptz)
returns void
language plpgsql
set search_path = public, pg_temp
as $$
begin
  -- A customer Stripe deleted is never linked again (a late event of a purchase made under it).
  if exists (select 1 from public.billing_deleted_customers d where d.stripe_customer_id = p_customer_id) then
    return;
  end if;
  -- No conflict target: the user may have a customer already (user_id) and the customer may be linked already
  -- (stripe_customer_id); either way the first link stays...
  insert into public.billing_customers (user_id, stripe_customer_id, account_created, created_at)
  values (p_user_id, p_customer_id, false, p_now)
  on conflict do nothing;
  -- ...unless the user's customer was deleted at Stripe: this live one takes its place.
  update public.billing_customers b
     set stripe_customer_id = p_customer_id, deleted_at = null, created_at = p_now
   where b.user_id = p_user_id and b.deleted_at is not null
     and not exists (select 1 from public.billing_customers o where o.stripe_customer_id = p_customer_id);
end;
$$;

create or replace function public.billing_forget_customer(p_customer_id text, p_now timestamptz)
returns void
language plpgsql
set search_path = public, pg_temp
as $$
declare
  v_user_id text;
  v_other text;
begin
  insert into public.billing_deleted_customers (stripe_customer_id, deleted_at)
  values (p_customer_id, p_now)
  on conflict do nothing;
  update public.billing_customers b set deleted_at = p_now
   where b.stripe_customer_id = p_customer_id and b.deleted_at is null
  returning b.user_id into v_user_id;
  if v_user_id is null then
    return;
  end if;
  select s.stripe_customer_id into v_other
    from public.subscriptions s
   where s.user_id = v_user_id and s.stripe_customer_id is not null and s.stripe_customer_id <> p_customer_id
     and s.stripe_subscription_id is not null and s.status <> 'canceled'
     and not exists (select 1 from public.billing_deleted_customers d where d.stripe_customer_id = s.stripe_customer_id)
   order by s.created_at desc
   limit 1;
  if v_other is not null then
    perform public.billing_link_customer(v_user_id, v_other, p_now);
  end if;
end;
$$;

create or replace function public.subscriptions_user_renewal_ends_round_mark()
returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  -- Only while the agent is not back (not 'active', as the resume reads it): a round's own resume runs once it is,
  -- and one whose read-back failed (its claim given back) leaves the renewal's event to arrive before the next round
  -- finishes it and mails "is back".
  if old.cancel_at_period_end and not new.cancel_at_period_end and new.status <> 'canceled'
     and new.agent_deleted_mailed_at is not null and new.agent_resume_claimed_at is null
     and exists (select 1 from public.agents a where a.id = new.agent_id and a.status <> 'active') then
    new.agent_deleted_mailed_at := null;
  end if;
  return new;
end;
$$;

update "oauthClient" c
   set name = a.name, "updatedAt" = now()
  from public.agent_oauth_clients l
  join public.agents a on a.id = l.agent_id
 where c."clientId" = l.client_id and c.name is distinct from a.name;

revoke execute on function public.billing_link_customer(text, text, timestamptz) from public, anon, authenticated;
revoke execute on function public.billing_forget_customer(text, timestamptz) from public, anon, authenticated;
revoke execute on function public.subscriptions_user_renewal_ends_round_mark() from public, anon, authenticated;
