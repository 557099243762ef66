-- The inviter's daily limit survives deleting the organization (docs/security.md boundary 8; found by a review).
--
-- public.invitation_claim counted the inviter's rows of the auth library's `invitation` table, and deleting an
-- organization deletes its invitations (the library's deleteOrganization, and the foreign key's cascade). So an
-- inviter who sent their 20 invitations, deleted the organization and made another got 20 more, as often as they
-- liked: the phishing relay the limit stops was open again.
--
-- The count now reads a record the service alone writes: a claim is no longer deleted when its invitation is
-- written, it is kept as that invitation's record (`invitation_id` set) for 24 hours, whatever becomes of the
-- invitation or its organization. The count is the inviter's records of the last 24 hours plus the claims not yet
-- turned into an invitation (a claim whose invitation never came still stops counting after 5 minutes). An
-- invitation written without a claim (none is, through the API; a seed or an operator might) gets a record of its
-- own, so it counts too. Times are the service clock's throughout (the library stamps invitations with the real
-- time; the claim's time is the one the count compares).

alter table public.invitation_claims add column invitation_id text;
comment on table public.invitation_claims is
  'An invitation an inviter may send (invitation_id null, 5 minutes) or has sent (invitation_id set, kept 24 hours): what the daily limit counts';

-- The invitations of the last 24 hours, as records (they were counted from the library's table until now).
insert into public.invitation_claims (inviter_id, created_at, invitation_id)
select i."inviterId", i."createdAt", i.id from public."invitation" i
 where i."createdAt" > now() - interval '24 hours'
   and not exists (select 1 from public.invitation_claims c where c.invitation_id = i.id);

create or replace function public.invitation_claim(p_inviter_id text, p_now timestamptz, p_per_day integer)
returns timestamptz
language plpgsql volatile
set search_path = public, pg_temp
as $$
declare
  v_count integer;
  v_oldest timestamptz;
begin
  perform pg_advisory_xact_lock(hashtextextended('invitation_claim:' || p_inviter_id, 0));
  -- Anyone's claim prunes what no longer counts: claims whose invitation never came, records older than a day.
  delete from public.invitation_claims
   where (invitation_id is null and created_at < p_now - interval '5 minutes')
      or created_at <= p_now - interval '24 hours';
  select count(*)::integer, min(c.created_at) into v_count, v_oldest
    from public.invitation_claims c
   where c.inviter_id = p_inviter_id and c.created_at > p_now - interval '24 hours';
  if v_count >= p_per_day then
    return v_oldest + interval '24 hours';
  end if;
  insert into public.invitation_claims (inviter_id, created_at) values (p_inviter_id, p_now);
  return null;
end
$$;

-- Writing an invitation turns the inviter's oldest open claim into its record. SKIP LOCKED: invitations written at
-- the same time each take a different claim.
create or replace function public.invitation_claim_consume()
returns trigger
language plpgsql volatile
set search_path = public, pg_temp
as $$
begin
  update public.invitation_claims set invitation_id = new.id
   where id = (select c.id from public.invitation_claims c
                where c.inviter_id = new."inviterId" and c.invitation_id is null
                order by c.id limit 1 for update skip locked);
  if not found then
    insert into public.invitation_claims (inviter_id, created_at, invitation_id)
    values (new."inviterId", new."createdAt", new.id);
  end if;
  return null;
end
$$;

revoke execute on function public.invitation_claim(text, timestamptz, integer) from public, anon, authenticated;
revoke execute on function public.invitation_claim_consume() from public, anon, authenticated;
