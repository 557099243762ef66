-- A banned user's reviews are neither shown nor counted while the ban lasts.
--
-- A ban ends the user's sessions and tokens and stops them writing, but what they had written stayed: an account
-- banned for review-bombing (one-star reviews with insults, or a seller's five-star reviews of its own agent from
-- made-up accounts) kept its reviews in the agent's list, its reviewCount and averageRating, which decide how buyers
-- see the agent. Hidden, not deleted (decision): a ban can be lifted, or end by itself (banExpires), and the reviews
-- come back with it; deleting them is the author's or an admin's act (DELETE /agents/{id}/reviews/{reviewId}), as
-- before. The author's own view needs nothing: a banned user cannot sign in.
--
-- One definition, used by the service's queries (functions/catalog/reviews.ts and agents.ts) and by what the anon and
-- authenticated roles read (the reviews policy and the two catalog views).
-- Security definer: those roles have no access to the auth library's "user" table (20261122000200_auth.sql), and
-- the function reveals only whether an author's reviews are shown, which the reviews list shows anyway. A ban whose
-- banExpires has passed no longer counts, as the library lifts it at the user's next sign-in; the library writes
-- banExpires from the host's real clock, so the database's now() is the time to compare it with.
create function public.review_author_in_good_standing(p_user_id text) returns boolean
language sql stable security definer
set search_path = pg_catalog, public
as $$
  select not exists (
    select 1 from public."user" u
     where u.id = p_user_id and coalesce(u.banned, false) and (u."banExpires" is null or u."banExpires" > now())
  )
$$;
revoke all on function public.review_author_in_good_standing(text) from public;
grant execute on function public.review_author_in_good_standing(text) to anon, authenticated;

alter policy reviews_public_read on public.reviews
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status))
         and public.review_author_in_good_standing(user_id));

-- The two catalog views that read reviews, restated whole from 20261125000100_status_rules.sql with only the review
-- filter added.
create or replace view public.catalog_agents with (security_invoker = true) as
  select a.id, a.slug, a.name, a.description, a.long_description, a.status, a.installs, a.created_at, a.updated_at,
         coalesce(r.review_count, 0) as review_count, r.average_rating,
         coalesce(tg.tags, '{}') as tags
  from public.agents a
  left join lateral (
    select count(*)::integer as review_count, round(avg(rating)::numeric, 2) as average_rating
    from public.reviews where agent_id = a.id and public.review_author_in_good_standing(user_id)
  ) r on true
  left join lateral (
    select array_agg(t.slug order by t.slug) as tags
    from public.agent_tags at join public.tags t on t.id = at.tag_id where at.agent_id = a.id
  ) tg on true
  where public.agent_is_published(a.status);

create or replace view public.catalog_reviews with (security_invoker = true) as
  select r.id, r.agent_id, r.user_id, r.rating, r.title, r.body, r.created_at, r.updated_at
  from public.reviews r join public.agents a on a.id = r.agent_id
  where public.agent_is_published(a.status) and public.review_author_in_good_standing(r.user_id);
