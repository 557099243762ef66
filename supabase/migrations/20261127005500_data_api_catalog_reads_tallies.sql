-- The Data API's catalog read costs the same however many reviews there are (review 60).
--
-- public.catalog_agents, the view anyone may read through PostgREST (`GET /rest/v1/catalog_agents`, no account, not
-- behind the service's rate limiter), still counted every review of every listed agent review by review: the
-- security-definer public.review_shown twice per review (the view's filter, and the reviews policy, which holds
-- inside a security_invoker view). 100,000 reviews took about 2 s per anonymous read, past Supabase's 3 s statement
-- timeout for `anon` at about 150,000, and a few reads at once kept the database's cores busy for the service too.
-- Migration 20261127004700 gave the HTTP reads the tallies and kept them from the Data API's roles (its note 5): the
-- holds would tell which agents have reviews of temporarily banned accounts, and until when.
--
-- 1. public.catalog_review_totals(agent): a published agent's shown-review count and average rating, read from the
--    tallies (public.shown_review_totals), and nothing for an agent that is not published. It answers what
--    GET /agents shows as reviewCount and averageRating, net of every ban, so it tells the Data API's roles nothing
--    the HTTP API does not (no hold, no ban end); security definer, since those roles read no tally (rule 28), with
--    its search_path pinned, pg_temp last.
-- 2. public.catalog_agents reads it: one call per listed agent, whatever the number of reviews.
-- 3. Hardening the review found no way through today: the two security-definer functions the Data API's roles may
--    call name pg_temp last in their search_path (a session that could create temporary tables would otherwise have
--    them looked up first), and those roles hold no TRUNCATE anywhere in public (Supabase's default privileges grant
--    it to them on every new table, and TRUNCATE ignores row-level security; PostgREST cannot issue it).

-- 1. ---------------------------------------------------------------------------------------- the Data API's totals
create function public.catalog_review_totals(p_agent_id uuid) returns table (review_count integer, average_rating numeric)
language sql stable security definer
set search_path = pg_catalog, public, pg_temp
as $$
  select s.review_count, s.average_rating
    from public.agents a
   cross join lateral public.shown_review_totals(a.id) s
   where a.id = p_agent_id and public.agent_is_published(a.status)
$$;
revoke all on function public.catalog_review_totals(uuid) from public;
grant execute on function public.catalog_review_totals(uuid) to anon, authenticated;

-- 2. ------------------------------------------------------------------- the view (20261127004700, its count changed)
create or replace view public.catalog_agents with (security_invoker = true) as
  select a.id, a.slug, a.name, a.description, a.long_description, a.status, a.installs, a.created_at, a.updated_at,
         coalesce(r.review_count, 0) as review_count, r.average_rating,
         coalesce(tg.tags, '{}') as tags
  from public.agents a
  left join lateral public.catalog_review_totals(a.id) r on true -- (changed in 20261127005500)
  left join lateral (
    select array_agg(t.slug order by t.slug) as tags
    from public.agent_tags at join public.tags t on t.id = at.tag_id where at.agent_id = a.id
  ) tg on true
  where public.agent_is_published(a.status);

-- 3. ------------------------------------------------------------------------------------------------- hardening
alter function public.review_shown(uuid) set search_path = pg_catalog, public, pg_temp;
alter function public.data_api_token_reaches(uuid) set search_path = pg_catalog, public, pg_temp;
revoke truncate on all tables in schema public from anon, authenticated;
alter default privileges in schema public revoke truncate on tables from anon, authenticated;
