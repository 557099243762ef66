-- Reviews an agent's backend writes are marked, and do not replace what the user wrote; a review's author is not
-- shown to the public (review 49).
--
-- 1. contract.md lets an agent's token act on reviews of its own agent (as the user). A hostile agent's backend, with
--    the token of each user who ever consented to it, replaced the user's own 1-star review with a 5-star one, or
--    deleted it, and nothing told the public. Now a review says whether an agent's backend wrote it
--    (`written_by_agent`, set by the service on every write), and the service refuses an agent's token a review the
--    user wrote themselves (functions/catalog/reviews.ts: in the write's own statement).
alter table public.reviews add column written_by_agent boolean not null default false;

-- 2. The author's id is the id every agent the user signed in to knows them by (its tokens' `sub`, GET /me): any agent's
--    backend read which of its users reviewed which other agent, and what they wrote, from the public list; and a
--    review gone from it told a known id's ban. The Data API's roles read reviews without `user_id` (the policy still
--    judges rows by it: a policy's own reads need no column grant). `author_banned_for_good` stays readable: the
--    catalog views, run as the caller, filter on it, and every row the policy lets them read has it false.
revoke select on public.reviews from anon, authenticated;
grant select (id, agent_id, rating, title, body, written_by_agent, author_banned_for_good, created_at, updated_at)
  on public.reviews to anon, authenticated;

-- The view loses the column (restated from 20261127004700 without user_id, with the new flag; a view's columns can
-- only be dropped by dropping it).
drop view public.catalog_reviews;
create view public.catalog_reviews with (security_invoker = true) as
  select r.id, r.agent_id, r.rating, r.title, r.body, r.written_by_agent, r.created_at, r.updated_at
  from public.reviews r join public.agents a on a.id = r.agent_id
  where public.agent_is_published(a.status) and not r.author_banned_for_good and public.review_shown(r.id);
grant select on public.catalog_reviews to anon, authenticated;
