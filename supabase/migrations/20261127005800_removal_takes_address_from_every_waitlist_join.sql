-- Removing a user takes their proved address from every waitlist join in the interaction feed, whoever made it
-- (review 71).
--
-- Another signed-in account may put any address on a waitlist (a colleague's, or its owner's second account). When
-- the address's owner, having verified it, is removed, the waitlist entry of that address goes (20261127003900), but
-- public.erase_removed_user_from_catalog took the address only from feed rows recorded without an account (user_id
-- null, 20261127004300): the join by the other account kept it, tied to the agent, readable by every admin at
-- GET /admin/interactions, against docs/billing.md ("their email, name and messages from the interaction feed").
-- Now the address goes from every waitlist_signup row that holds it, by the rule the entries follow (only an address
-- the user had proved is theirs). Only waitlist joins record an address that may be someone else's: a demo request or
-- an enterprise inquiry records its signed-in requester's own, taken by user_id as before.
--
-- 1. An index finds a removed address's joins (the statement scanned the feed).
-- 2. The function, restated from 20261127004300 with the one statement marked.
-- 3. Removals already made: a join whose entry is gone lost it to the removal of its address's proved owner (the
--    entries go by nothing else; an agent's deletion leaves its feed rows with no agent), so its address goes too.

-- 1. -----------------------------------------------------------------------------------------------------------
create index interactions_waitlist_email_idx on public.interactions (lower(metadata ->> 'email'))
  where type = 'waitlist_signup';

-- 2. -----------------------------------------------------------------------------------------------------------
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
  -- (changed in 20261127005800) their proved address in every waitlist join, made signed out or by another account
  update public.interactions set metadata = metadata - 'email'
   where old."emailVerified" and type = 'waitlist_signup' and lower(metadata ->> 'email') = lower(old.email);
  return old;
end
$$;

-- 3. -----------------------------------------------------------------------------------------------------------
update public.interactions i set metadata = i.metadata - 'email'
 where i.type = 'waitlist_signup' and i.agent_id is not null and i.metadata ? 'email'
   and not exists (select 1 from public.waitlist_entries w
                    where w.agent_id = i.agent_id and w.email = lower(i.metadata ->> 'email'));
