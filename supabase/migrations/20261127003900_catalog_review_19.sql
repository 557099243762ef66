-- A removed account takes from the waitlist only the entries of its own verified address (review 19, finding A).
--
-- public.erase_removed_user_from_catalog (20261127000200) deleted every waitlist entry whose user_id was the removed
-- account. joinWaitlist (functions/catalog/waitlist.ts) records the signed-in caller's id beside whatever address was
-- typed, and `on conflict do nothing` keeps the first row of an address: an account that put someone else's address
-- on a list first held that row, the owner's own later join was the 200 duplicate, and the account's removal (an
-- admin removing an abusive account) took the owner's entry, which rule 27 of docs/security.md already said it must
-- not. Now the removal deletes the entries of the account's own address when it had verified it, as before, and
-- leaves every other entry it made: its user_id is cleared (the column is nullable and has no foreign key; the row
-- is then what an anonymous join leaves), so nothing points at the removed account and the address's owner keeps
-- the entry. The rest of the function is unchanged.
create or replace function public.erase_removed_user_from_catalog() returns trigger
language plpgsql
set search_path = pg_catalog, public
as $$
begin
  delete from public.reviews where user_id = old.id;
  with gone as (
    delete from public.agent_installs where user_id = old.id returning agent_id
  )
  update public.agents a set installs = greatest(a.installs - 1, 0) from gone where a.id = gone.agent_id;
  -- the entries of their address only if they had proved it is theirs; an entry they typed with any other address
  -- (or with theirs, never verified) may be its owner's, and stays, no longer theirs
  delete from public.waitlist_entries where old."emailVerified" and email = lower(old.email);
  update public.waitlist_entries set user_id = null where user_id = old.id;
  update public.interactions set metadata = metadata - array['email', 'name', 'message']
   where user_id = old.id and metadata ?| array['email', 'name', 'message'];
  return old;
end
$$;
