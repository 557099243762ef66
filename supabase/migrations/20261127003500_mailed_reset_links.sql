-- A mailed password-reset link ends the user's earlier mailed links, not a purchase claim's set-password token (found
-- by review 18).
--
-- Review 17 made a newly mailed reset link end the user's earlier ones (functions/auth/better-auth.ts,
-- sendResetPassword) by deleting every older `reset-password:%` verification row of the user. A purchase claim's
-- set-password token is stored exactly as such a row (functions/billing/claim-purchase.ts: the claimant just proved
-- the mailbox and gets the token in the answer, never by mail), so anyone who knew the address could ask for a reset
-- right after the claim and break the claimant's "choose your password" step (400 INVALID_TOKEN).
--
-- Now the links that were mailed are recorded here, and a newly mailed one ends only those of them made before it.
-- One call, public.reset_link_mailed, in the transaction that queues the mail. Records go with their user, and each
-- call drops the user's records whose link is gone (used, expired and pruned, or ended), so a user has at most the
-- few records of links mailed within the hour. Two requests at the same moment may both leave their link working
-- (neither saw the other's record), as every link did before review 17.
create table public.mailed_reset_links (
  identifier text primary key,
  user_id text not null references "user" (id) on delete cascade,
  created_at timestamptz(3) not null
);
create index mailed_reset_links_user_idx on public.mailed_reset_links (user_id);
alter table public.mailed_reset_links enable row level security;
-- No policies and no grants: only the service (table owner) reads or writes them.
revoke all on public.mailed_reset_links from anon, authenticated;

create function public.reset_link_mailed(p_user_id text, p_identifier text) returns void
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_created timestamptz;
begin
  select v."createdAt" into v_created from "verification" v where v.identifier = p_identifier;
  if v_created is null then
    return; -- used or ended before its mail was queued: nothing to record
  end if;
  delete from "verification" v
   using public.mailed_reset_links m
   where m.user_id = p_user_id and v.identifier = m.identifier and v."createdAt" < v_created;
  delete from public.mailed_reset_links m
   where m.user_id = p_user_id
     and not exists (select 1 from "verification" v where v.identifier = m.identifier);
  insert into public.mailed_reset_links (identifier, user_id, created_at)
  values (p_identifier, p_user_id, v_created)
  on conflict (identifier) do nothing;
end
$$;
revoke execute on function public.reset_link_mailed(text, text) from public, anon, authenticated;
