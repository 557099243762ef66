-- A review knows from when it is shown, so no read of reviews asks a function about each one.
--
-- The Data API's review reads (`reviews`, `catalog_reviews`, as `anon` or `authenticated`: no account needed, not
-- behind the service's rate limiter) asked the security-definer public.review_shown about every row they read, twice
-- through the view (its filter and the reviews policy); a `Prefer: count=exact` over an agent's reviews cost two
-- function calls per review, seconds at 100,000. The service's public reviews list asked it once per row too, so a
-- temporary ban of a review-bombing's accounts made each page read every hidden review before the first shown one.
--
-- 1. reviews.shown_from: the end of its author's ban (public.ban_ends: -infinity when not banned, infinity for a ban
--    for good), kept by the triggers that keep author_banned_for_good (20261127004700 note 3), in the same writes: the
--    review's insert or change of author (which reads the author `for share`) and a change of the author's ban or an
--    author inserted already banned (every review of theirs, in one statement). A review is shown at t when
--    shown_from <= t: exactly public.review_shown, which stays the rule's statement (the tests hold the two equal);
--    a temporary ban ends with no write, as before. author_banned_for_good = (shown_from = 'infinity').
-- 2. The reviews policy reads the column, not the function. The Data API's roles hold no grant on it (a shown row's
--    value would tell them its author's past ban and when it ended): a policy's own reads need none, and the view
--    names it nowhere.
-- 3. catalog_reviews, security_invoker, leaves the temporary ban to the policy, which binds every role the view is
--    served to (anon, authenticated); it keeps skipping the banned for good by the flag they may read (the partial
--    index). A role that bypasses row-level security (postgres, Supabase's service_role) reads through the view the
--    reviews of authors under a temporary ban too, as it reads the table.
-- 4. The service's list (functions/catalog/reviews.ts) reads the column.

-- No ban or review may change between the backfill and the triggers that keep the column (as in 20261127004700).
do $$
begin
  lock table public."user", public.reviews in share row exclusive mode;
end
$$;

-- 1. ---------------------------------------------------------------------------------------------- the column
alter table public.reviews add column shown_from timestamptz not null default '-infinity';
update public.reviews r set shown_from = public.ban_ends(u.banned, u."banExpires")
  from public."user" u where u.id = r.user_id and public.ban_ends(u.banned, u."banExpires") <> '-infinity';

-- Restated from 20261127004700 with shown_from set beside the flag.
create or replace function public.review_notes_authors_ban() returns trigger
language plpgsql
set search_path = pg_catalog, public
as $$
declare
  v_ends timestamptz;
begin
  select public.ban_ends(u.banned, u."banExpires") into v_ends from public."user" u where u.id = new.user_id for share;
  new.shown_from := coalesce(v_ends, '-infinity');
  new.author_banned_for_good := new.shown_from = 'infinity';
  return new;
end
$$;

-- Restated from 20261127004700 with only its last statement changed: every review of an account whose ban end
-- changed takes the new end (before: only those whose flag changed).
create or replace function public.user_ban_moves_review_tallies() returns trigger
language plpgsql
set search_path = pg_catalog, public
as $$
declare
  v_ids text[];
  v_was timestamptz[];
  v_ends timestamptz[];
  v_agents uuid[];
  v_tallied timestamptz[];
  v_reviews integer[];
  v_sums bigint[];
begin
  if tg_op = 'INSERT' then
    select array_agg(n.id), array_agg('-infinity'::timestamptz), array_agg(public.ban_ends(n.banned, n."banExpires"))
      into v_ids, v_was, v_ends
      from changed_users n where public.ban_ends(n.banned, n."banExpires") <> '-infinity';
  else
    select array_agg(n.id), array_agg(public.ban_ends(o.banned, o."banExpires")), array_agg(public.ban_ends(n.banned, n."banExpires"))
      into v_ids, v_was, v_ends
      from previous_users o join changed_users n on n.id = o.id
     where public.ban_ends(o.banned, o."banExpires") <> public.ban_ends(n.banned, n."banExpires");
  end if;
  if v_ids is null then
    return null;
  end if;
  select array_agg(g.agent_id), array_agg(g.ends), array_agg(g.reviews), array_agg(g.rating_sum)
    into v_agents, v_tallied, v_reviews, v_sums
    from (select r.agent_id, m.ends, sum(m.sign)::integer as reviews, sum(m.sign * r.rating)::bigint as rating_sum
            from unnest(v_ids, v_was, v_ends) a (id, was, ends)
            join public.reviews r on r.user_id = a.id
           cross join lateral (values (a.was, -1), (a.ends, 1)) m (ends, sign)
           group by 1, 2) g;
  if v_agents is not null then
    perform public.review_tallies_add(v_agents, v_tallied, v_reviews, v_sums);
  end if;
  update public.reviews r set shown_from = a.ends, author_banned_for_good = (a.ends = 'infinity') -- (changed in 20261127005600)
    from unnest(v_ids, v_ends) a (id, ends)
   where r.user_id = a.id and r.shown_from <> a.ends;
  return null;
end
$$;

-- 2. ---------------------------------------------------------------------------------------------- the policy
alter policy reviews_public_read on public.reviews
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status))
         and not author_banned_for_good and shown_from <= now());

-- 3. ------------------------------------------------------------ the view (20261127005200, its filter changed)
create or replace view public.catalog_reviews with (security_invoker = true) as
  select r.id, r.agent_id, r.rating, r.title, r.body, r.written_by_agent, r.created_at, r.updated_at
  from public.reviews r join public.agents a on a.id = r.agent_id
  where public.agent_is_published(a.status) and not r.author_banned_for_good;
