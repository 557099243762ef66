-- What the Data API's roles read is what the HTTP API shows them, no more (found by a hostile review of the database
-- as PostgREST serves it).
--
-- 1. The ban check answers by review, not by account. public.review_author_in_good_standing(user id) was security
--    definer and executable by anon and authenticated (the reviews policy and the catalog views call it), so anyone
--    knowing a user id (an agent backend has its users' ids as its tokens' `sub` and in webhook payloads; an
--    organization its members') asked /rpc/review_author_in_good_standing whether that account was banned, when it had
--    a review on a published agent: 20261126002400/2500 narrowed it to such authors, which is exactly the case the
--    hidden review is meant to keep quiet. Now the check takes a review's id (public.review_shown): the id of a review
--    hidden by a ban is not listed anywhere, so only its author, or someone who saw it listed before the ban and sees
--    it vanish anyway, can ask about it. The policy, both views and the service's queries (functions/catalog) call it;
--    the check by user id is dropped, so the rule has one definition.
-- 2. A subscriber reads the addons of their own subscriptions (what counts toward their quota), not the admin's
--    private note about the grant or which admins granted or revoked it: over HTTP the addon list is admin-only. The
--    table-wide grant becomes a grant of the columns that say what the addon gives (on Supabase the default privileges
--    grant the table to authenticated, hence the revoke first).
-- 3. Sequences: anon and authenticated have no business with the ledger's, the invitation claims' or the webhook
--    events' sequences (on Supabase the default privileges grant them; PostgREST does not serve sequences, so this is
--    hygiene, as webhook_deliveries_seq and stripe_reads already had).

create function public.review_shown(p_review_id uuid) returns boolean
language sql stable security definer
set search_path = pg_catalog, public
as $$
  select not exists (
    select 1 from public.reviews r join public."user" u on u.id = r.user_id
     where r.id = p_review_id and coalesce(u.banned, false) and (u."banExpires" is null or u."banExpires" > now())
  )
$$;
revoke all on function public.review_shown(uuid) from public;
grant execute on function public.review_shown(uuid) to anon, authenticated;

alter policy reviews_public_read on public.reviews
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status))
         and public.review_shown(id));

-- The two catalog views that read reviews, restated whole from 20261126002300 with only the check changed.
create or replace view public.catalog_agents with (security_invoker = true) as
  select a.id, a.slug, a.name, a.description, a.long_description, a.status, a.installs, a.created_at, a.updated_at,
         coalesce(r.review_count, 0) as review_count, r.average_rating,
         coalesce(tg.tags, '{}') as tags
  from public.agents a
  left join lateral (
    select count(*)::integer as review_count, round(avg(rv.rating)::numeric, 2) as average_rating
    from public.reviews rv where rv.agent_id = a.id and public.review_shown(rv.id)
  ) r on true
  left join lateral (
    select array_agg(t.slug order by t.slug) as tags
    from public.agent_tags at join public.tags t on t.id = at.tag_id where at.agent_id = a.id
  ) tg on true
  where public.agent_is_published(a.status);

create or replace view public.catalog_reviews with (security_invoker = true) as
  select r.id, r.agent_id, r.user_id, r.rating, r.title, r.body, r.created_at, r.updated_at
  from public.reviews r join public.agents a on a.id = r.agent_id
  where public.agent_is_published(a.status) and public.review_shown(r.id);

drop function public.review_author_in_good_standing(text);

revoke select on public.usage_addons from authenticated;
grant select (id, subscription_id, metric_id, amount, duration, period_start, revoked_at, created_at)
  on public.usage_addons to authenticated;

revoke all on sequence public.quota_ledger_seq from anon, authenticated;
revoke all on sequence public.invitation_claims_id_seq from anon, authenticated;
revoke all on sequence public.webhook_events_seq_seq from anon, authenticated;
