-- The inviter's daily limit holds against invitations sent all at once (issue 10 finding 8, invitations relayed
-- phishing; functions/auth/invitation-rules.ts).
--
-- Until now the organization plugin's beforeCreateInvitation hook counted the inviter's invitations of the last 24
-- hours, and the library wrote the new invitation afterwards, in another transaction. Fired in parallel, every
-- request counted before any had written: 15 invitations sent at once with 5 left admitted 13, so 28 in a day
-- (tests/identity/organizations.test.ts). Now the hook takes a claim and the count and the claim are one step. Under
-- a lock per inviter, public.invitation_claim counts the inviter's invitations of the last 24 hours plus the claims
-- not yet turned into an invitation, in one statement (so one snapshot), and records a claim only while that is
-- under the limit. Writing the invitation consumes the inviter's oldest claim in the same transaction (the trigger
-- below). So a concurrent count sees either the claim or the invitation, never both and never neither.
--
-- A claim whose invitation never came (the library refused the request after the hook, or the process died) stops
-- counting after 5 minutes and is deleted by the next claim anyone takes.
create table public.invitation_claims (
  id bigint generated always as identity primary key,
  inviter_id text not null,
  created_at timestamptz(3) not null
);
create index invitation_claims_inviter_idx on public.invitation_claims (inviter_id, id);
create index invitation_claims_created_idx on public.invitation_claims (created_at);
alter table public.invitation_claims enable row level security;
revoke all on public.invitation_claims from anon, authenticated;

-- Records a claim for one more invitation by p_inviter_id and returns null, or refuses (records nothing) and returns
-- when the oldest invitation or claim that counts leaves the 24-hour window (the caller's Retry-After).
create function public.invitation_claim(p_inviter_id text, p_now timestamptz, p_per_day integer)
returns timestamptz
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_count integer;
  v_oldest timestamptz;
begin
  perform pg_advisory_xact_lock(hashtextextended('invitation_claim:' || p_inviter_id, 0));
  delete from public.invitation_claims where created_at < p_now - interval '5 minutes';
  select count(*)::integer, min(at) into v_count, v_oldest
    from (select i."createdAt" as at from public."invitation" i
           where i."inviterId" = p_inviter_id and i."createdAt" > p_now - interval '24 hours'
          union all
          select c.created_at from public.invitation_claims c where c.inviter_id = p_inviter_id) counted;
  if v_count >= p_per_day then
    return v_oldest + interval '24 hours';
  end if;
  insert into public.invitation_claims (inviter_id, created_at) values (p_inviter_id, p_now);
  return null;
end
$$;

-- Writing an invitation turns the inviter's oldest claim into it. SKIP LOCKED: invitations written at the same time
-- each take a different claim (without it, both would pick the same oldest one, one would delete nothing, and a
-- claim would be left counting for 5 minutes).
create function public.invitation_claim_consume()
returns trigger
language plpgsql volatile
set search_path = public, pg_temp
as $$
begin
  delete from public.invitation_claims
   where id = (select c.id from public.invitation_claims c where c.inviter_id = new."inviterId"
                order by c.id limit 1 for update skip locked);
  return null;
end
$$;

create trigger invitation_claim_consume after insert on public."invitation"
  for each row execute function public.invitation_claim_consume();

revoke execute on function public.invitation_claim(text, timestamptz, integer) from public, anon, authenticated;
revoke execute on function public.invitation_claim_consume() from public, anon, authenticated;
