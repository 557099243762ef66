-- Removing a user takes their email from the interaction feed also where they joined a waitlist signed out (review 29).
--
-- public.erase_removed_user_from_catalog (20261127000200, restated in 20261127003900) took the email, name and message
-- from the feed's rows of the removed user (user_id = old.id). A waitlist join made signed out is recorded by its
-- address alone (user_id null, metadata { email }), so the removed user's address stayed in the feed, tied to the
-- agent, readable by admins at GET /admin/interactions for good, against docs/billing.md ("their email, name and
-- messages from the interaction feed"). Now the address goes from those rows too, by the rule the waitlist entries
-- follow: only an address the user had proved is theirs (an address anyone typed before verifying it may be its
-- owner's, whose join stays).
--
-- Restated from 20261127003900 with the one statement marked; create or replace keeps its owner and privileges.
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
  -- (20261127004300) their proved address in rows recorded without an account: a waitlist join made signed out
  update public.interactions set metadata = metadata - 'email'
   where old."emailVerified" and user_id is null and lower(metadata ->> 'email') = lower(old.email);
  return old;
end
$$;
