-- A removed user leaves the catalog, and the Data API reads no more of tags and tiers than the HTTP API shows (found
-- by a hostile review of the catalog room, review 01).
--
-- 1. Removing a user (POST /api/auth/admin/remove-user, for abuse as much as at the user's own request) is erasure
--    (20261122000200_auth.sql: subscriptions go with the user). The catalog kept the rest: reviews.user_id,
--    agent_installs.user_id and waitlist_entries.user_id have no foreign key to "user", so a removed review-bomber's
--    reviews stayed listed and counted in reviewCount and averageRating (a ban hid them, the harder measure did not),
--    their installs stayed counted, and the interaction feed, whose rows of a deleted user were to stay "anonymous"
--    (interactions.user_id on delete set null), kept their email, name and messages in its metadata. Now one trigger,
--    before the user row goes (so before the foreign keys' own actions), deletes their reviews, their installs (and
--    takes each from its agent's installs counter, so accounts made to inflate it and removed stop counting), their
--    waitlist entries (those they joined signed in, and any for their address once they had verified it), and strips
--    email, name and message from the metadata of their interactions; the rows stay, as analytics history, with their type, agent and time.
--    A trigger rather than foreign keys: installs need their counter moved, and the interactions need their metadata
--    cleaned, in the same transaction as the removal. A review written while its author is being removed takes a share
--    lock of the author's row (functions/catalog/reviews.ts), so it is written before the removal or not at all.
--    (Amended in place before release, after a review of the first version: it deleted every waitlist entry of the
--    removed account's address, verified or not.)
-- 2. Tags: the policy was `using (true)`, so /rest/v1/tags listed a tag only a draft carries, which GET /tags hides
--    (catalog/tags.ts listTags: "a draft's tags do not announce it"). Now a tag is read when a published agent carries
--    it. (GET /tags also lists a tag no agent carries yet; the Data API cannot tell that one from a draft's without
--    reading drafts, so it shows less there.)
-- 3. Tiers: the whole table was granted to anon and authenticated, Stripe product and price ids included ("Stripe ids
--    are never shown", docs/catalog.md). Now the columns a tier shows are granted (on Supabase the default privileges
--    grant the table, hence the revoke first); catalog_tiers reads only those.

create function public.erase_removed_user_from_catalog() returns trigger
language plpgsql
set search_path = pg_catalog, public
as $$
begin
  delete from public.reviews where user_id = old.id;
  with gone as (
    delete from public.agent_installs where user_id = old.id returning agent_id
  )
  update public.agents a set installs = greatest(a.installs - 1, 0) from gone where a.id = gone.agent_id;
  -- the entries they joined signed in, and those of their address only if they had proved it is theirs: an account
  -- made with someone else's address and never verified must not take the owner's entries with it
  delete from public.waitlist_entries where user_id = old.id or (old."emailVerified" and email = lower(old.email));
  update public.interactions set metadata = metadata - array['email', 'name', 'message']
   where user_id = old.id and metadata ?| array['email', 'name', 'message'];
  return old;
end
$$;
revoke execute on function public.erase_removed_user_from_catalog() from public, anon, authenticated;

create trigger user_removal_leaves_the_catalog before delete on "user"
  for each row execute function public.erase_removed_user_from_catalog();

alter policy tags_public_read on public.tags
  using (exists (select 1 from public.agent_tags at join public.agents a on a.id = at.agent_id
                  where at.tag_id = tags.id and public.agent_is_published(a.status)));

revoke select on public.tiers from anon, authenticated;
grant select (id, agent_id, name, price_cents, currency, interval, is_public, features, archived_at, created_at, updated_at)
  on public.tiers to anon, authenticated;
