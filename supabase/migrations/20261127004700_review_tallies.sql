-- A catalog read costs the same however many reviews an agent has (review 33).
--
-- Every GET /agents, GET /agents/{id} and reviews list counted and averaged all of an agent's reviews, calling the
-- security-definer public.review_shown once per review (it cannot be inlined): 20 agents of 25,000 reviews each took
-- 11.8 s to list, and ten anonymous lists at once held every connection of the pool; any account may write one review
-- per agent. Now each agent's shown reviews are tallied as they change, by triggers, in the transaction that changes
-- them, and a read takes the tally: a few rows whatever the number of reviews.
--
-- 1. The ban rule, once: public.ban_ends says when an account's ban stops holding (-infinity: not banned; infinity: a
--    ban for good; else its banExpires). public.banned_at (20261122000800) and public.review_shown (20261126002900)
--    are restated through it, with their behaviour unchanged; the tallies below are keyed by it. A review is shown
--    at time t when its author's ban ends at or before t; a review with no author row is shown (as review_shown
--    answers; reviews.user_id has no foreign key).
-- 2. public.review_tallies: per agent, the count and rating sum of its reviews that are not hidden for good (an
--    author not banned, or banned until a time). public.review_holds: per agent and ban end, those of them whose
--    author is banned until that time. Shown now = the tally minus the holds whose end is still ahead
--    (public.shown_review_totals), so a temporary ban's end needs no write to take effect, and a hold that has ended
--    is never read again (it goes when its author's ban changes). A read reads one tally row and the holds still
--    running: temporary bans are an admin's act, one account at a time (the library's ban-user with banExpiresIn).
-- 3. Kept by statement-level triggers, atomically with the change: reviews inserted, updated (rating, agent or
--    author) or deleted; an account's ban changed (banned, banExpires: its reviews move from the old end to the new,
--    in every agent at once); an account inserted already banned (its reviews written before it existed). A removed
--    account's reviews are deleted by user_removal_leaves_the_catalog before its row goes: the delete trigger takes
--    them off under the ban they had. Concurrency: a review's author row is read `for share` by its write (the
--    insert's row trigger; the statement trigger for updates and deletes), so a ban waits for a review being written
--    and then moves it, or the review waits for the ban and is counted under it; tally rows are updated in one
--    statement each, in agent order (upserts: parallel writers add up, none is lost).
-- 4. reviews.author_banned_for_good: true while the author's ban has no end. Such a review is shown to nobody but
--    admins, so every row the Data API's roles can read has it false (it tells them nothing). A partial index of the
--    others, in list order, lets the reviews list and the Data API's reads skip the reviews of accounts banned for
--    review-bombing instead of asking review_shown about each; the policy and the views say so (the same rows as
--    before: review_shown stays the rule, the flag a shortcut it implies). The reviews of an account under a
--    temporary ban are still read and asked about while it lasts.
-- 5. The views and the policy keep reading review by review (review_shown) for the Data API's roles: the tallies are
--    not theirs to read (the holds would tell which agents have reviews of temporarily banned accounts, and until
--    when), and no new security-definer function or view is opened to them (rule 28).

-- No ban or review may change between the backfill below and the triggers that keep it. In a DO block: the Supabase
-- CLI (`supabase db push`) runs each statement of a file on its own, outside a transaction block, where a bare LOCK
-- TABLE is refused (25P01); there the lock holds only for this statement, so push this migration while the service is
-- stopped or idle. The service's own runner (functions/platform/migrations.ts) runs the whole file in one transaction,
-- which keeps the lock to its end.
do $$
begin
  lock table public."user", public.reviews in share row exclusive mode;
end
$$;

-- 1. ------------------------------------------------------------------------------------------------ the ban rule
create function public.ban_ends(p_banned boolean, p_ban_expires timestamptz) returns timestamptz
language sql immutable as $$
  select case when coalesce(p_banned, false) then coalesce(p_ban_expires, 'infinity'::timestamptz) else '-infinity'::timestamptz end
$$;

create or replace function public.banned_at(p_banned boolean, p_ban_expires timestamptz, p_at timestamptz) returns boolean
language sql immutable as $$
  select public.ban_ends(p_banned, p_ban_expires) > p_at
$$;

create or replace function public.review_shown(p_review_id uuid) returns boolean
language sql stable security definer
set search_path = pg_catalog, public
as $$
  select not exists (
    select 1 from public.reviews r join public."user" u on u.id = r.user_id
     where r.id = p_review_id and public.banned_at(u.banned, u."banExpires", now())
  )
$$;

-- 2. ------------------------------------------------------------------------------------------------ the tallies
create table public.review_tallies (
  agent_id uuid primary key references public.agents (id) on delete cascade,
  reviews integer not null check (reviews >= 0),
  rating_sum bigint not null check (rating_sum >= 0)
);
create table public.review_holds (
  agent_id uuid not null references public.agents (id) on delete cascade,
  held_until timestamptz not null check (held_until > '-infinity' and held_until < 'infinity'),
  reviews integer not null check (reviews >= 0),
  rating_sum bigint not null check (rating_sum >= 0),
  primary key (agent_id, held_until)
);
-- The service's own: no policy, nothing granted (on Supabase the default privileges grant new tables, hence the revoke).
alter table public.review_tallies enable row level security;
alter table public.review_holds enable row level security;
revoke all on public.review_tallies, public.review_holds from anon, authenticated;

-- 4. ----------------------------------------------------------------------------- reviews hidden for good, skipped
alter table public.reviews add column author_banned_for_good boolean not null default false;
create index reviews_listed_idx on public.reviews (agent_id, created_at desc, id desc) where not author_banned_for_good;
-- a ban's change finds its account's reviews (so does the removal's delete, which scanned the table)
create index reviews_user_idx on public.reviews (user_id);

-- Backfill, under the locks taken above.
update public.reviews r set author_banned_for_good = true
  from public."user" u where u.id = r.user_id and public.ban_ends(u.banned, u."banExpires") = 'infinity';
insert into public.review_tallies (agent_id, reviews, rating_sum)
  select r.agent_id, count(*), sum(r.rating)
    from public.reviews r left join public."user" u on u.id = r.user_id
   where public.ban_ends(u.banned, u."banExpires") < 'infinity'
   group by r.agent_id;
insert into public.review_holds (agent_id, held_until, reviews, rating_sum)
  select r.agent_id, public.ban_ends(u.banned, u."banExpires"), count(*), sum(r.rating)
    from public.reviews r join public."user" u on u.id = r.user_id
   where public.ban_ends(u.banned, u."banExpires") > '-infinity' and public.ban_ends(u.banned, u."banExpires") < 'infinity'
   group by 1, 2;

-- 3. ---------------------------------------------------------------------------------------------- the triggers
-- Adds signed contributions to the tallies: per agent and author's ban end, a number of reviews and their rating sum
-- (negative to take them back). A ban for good is in no tally; a temporary one is in the tally and in its hold. The
-- rows there are locked first, in key order (writers of several agents queue in one order), and updated; the missing
-- ones are inserted (an insert's row is checked before its conflict is found: a negative change is always an update,
-- of a row that counted what it takes back). An agent being deleted is skipped (its tallies go with it).
create function public.review_tallies_add(p_agent_ids uuid[], p_ban_ends timestamptz[], p_reviews integer[], p_rating_sums bigint[])
returns void
language plpgsql
set search_path = pg_catalog, public
as $$
declare
  v_agents uuid[];
  v_reviews integer[];
  v_sums bigint[];
begin
  select array_agg(g.agent_id order by g.agent_id), array_agg(g.reviews order by g.agent_id), array_agg(g.rating_sum order by g.agent_id)
    into v_agents, v_reviews, v_sums
    from (select d.agent_id, sum(d.reviews)::integer as reviews, sum(d.rating_sum)::bigint as rating_sum
            from unnest(p_agent_ids, p_ban_ends, p_reviews, p_rating_sums) d (agent_id, ban_ends, reviews, rating_sum)
           where d.ban_ends < 'infinity' and exists (select 1 from public.agents a where a.id = d.agent_id)
           group by d.agent_id
          having sum(d.reviews) <> 0 or sum(d.rating_sum) <> 0) g;
  perform 1 from public.review_tallies t where t.agent_id = any (v_agents) order by t.agent_id for update;
  -- one statement: a row the update did not find (another writer's first review of the agent, committed since) is
  -- met by the insert's conflict, never skipped
  with changed as (
    update public.review_tallies t set reviews = t.reviews + d.reviews, rating_sum = t.rating_sum + d.rating_sum
      from unnest(v_agents, v_reviews, v_sums) d (agent_id, reviews, rating_sum)
     where t.agent_id = d.agent_id
    returning t.agent_id
  )
  insert into public.review_tallies as t (agent_id, reviews, rating_sum)
  select d.agent_id, d.reviews, d.rating_sum
    from unnest(v_agents, v_reviews, v_sums) d (agent_id, reviews, rating_sum)
   where not exists (select 1 from changed x where x.agent_id = d.agent_id)
   order by d.agent_id
  on conflict (agent_id) do update set reviews = t.reviews + excluded.reviews, rating_sum = t.rating_sum + excluded.rating_sum;

  perform 1 from public.review_holds h
    join unnest(p_agent_ids, p_ban_ends) d (agent_id, ban_ends) on h.agent_id = d.agent_id and h.held_until = d.ban_ends
   order by h.agent_id, h.held_until for update of h;
  with changes as (
    select d.agent_id, d.ban_ends, sum(d.reviews)::integer as reviews, sum(d.rating_sum)::bigint as rating_sum
      from unnest(p_agent_ids, p_ban_ends, p_reviews, p_rating_sums) d (agent_id, ban_ends, reviews, rating_sum)
     where d.ban_ends > '-infinity' and d.ban_ends < 'infinity' and exists (select 1 from public.agents a where a.id = d.agent_id)
     group by d.agent_id, d.ban_ends
    having sum(d.reviews) <> 0 or sum(d.rating_sum) <> 0
  ), changed as (
    update public.review_holds h set reviews = h.reviews + c.reviews, rating_sum = h.rating_sum + c.rating_sum
      from changes c where h.agent_id = c.agent_id and h.held_until = c.ban_ends
    returning h.agent_id, h.held_until
  )
  insert into public.review_holds as h (agent_id, held_until, reviews, rating_sum)
  select c.agent_id, c.ban_ends, c.reviews, c.rating_sum from changes c
   where not exists (select 1 from changed x where x.agent_id = c.agent_id and x.held_until = c.ban_ends)
   order by c.agent_id, c.ban_ends
  on conflict (agent_id, held_until) do update set reviews = h.reviews + excluded.reviews, rating_sum = h.rating_sum + excluded.rating_sum;
  delete from public.review_holds h
   using unnest(p_agent_ids, p_ban_ends) d (agent_id, ban_ends)
   where h.agent_id = d.agent_id and h.held_until = d.ban_ends and h.reviews = 0;
end
$$;
revoke all on function public.review_tallies_add(uuid[], timestamptz[], integer[], bigint[]) from public, anon, authenticated;

-- Counts (p_sign 1) or takes back (-1) reviews under their authors' bans as they stand, the authors read `for share`
-- first (in id order) so that no ban changes under the count.
create function public.review_tallies_count(p_agent_ids uuid[], p_user_ids text[], p_ratings integer[], p_signs integer[])
returns void
language plpgsql
set search_path = pg_catalog, public
as $$
declare
  v_agents uuid[];
  v_ends timestamptz[];
  v_reviews integer[];
  v_sums bigint[];
begin
  perform 1 from public."user" u where u.id = any (p_user_ids) order by u.id for share;
  select array_agg(g.agent_id), array_agg(g.ends), array_agg(g.reviews), array_agg(g.rating_sum)
    into v_agents, v_ends, v_reviews, v_sums
    from (select c.agent_id, public.ban_ends(u.banned, u."banExpires") as ends,
                 sum(c.sign)::integer as reviews, sum(c.sign * c.rating)::bigint as rating_sum
            from unnest(p_agent_ids, p_user_ids, p_ratings, p_signs) c (agent_id, user_id, rating, sign)
            left join public."user" u on u.id = c.user_id
           group by 1, 2) g;
  perform public.review_tallies_add(v_agents, v_ends, v_reviews, v_sums);
end
$$;
revoke all on function public.review_tallies_count(uuid[], text[], integer[], integer[]) from public, anon, authenticated;

-- Before a review is written: whether its author is banned for good, read `for share` (see 3).
create function public.review_notes_authors_ban() returns trigger
language plpgsql
set search_path = pg_catalog, public
as $$
declare
  v_ends timestamptz;
begin
  select public.ban_ends(u.banned, u."banExpires") into v_ends from public."user" u where u.id = new.user_id for share;
  new.author_banned_for_good := coalesce(v_ends = 'infinity', false);
  return new;
end
$$;
revoke all on function public.review_notes_authors_ban() from public, anon, authenticated;

create trigger review_notes_authors_ban before insert or update of user_id on public.reviews
  for each row execute function public.review_notes_authors_ban();

-- After reviews are written or deleted: the tallies follow. An update counts only if it changed what is tallied.
create function public.reviews_keep_tallies() returns trigger
language plpgsql
set search_path = pg_catalog, public
as $$
declare
  v_agents uuid[];
  v_users text[];
  v_ratings integer[];
  v_signs integer[];
begin
  if tg_op = 'INSERT' then
    select array_agg(r.agent_id), array_agg(r.user_id), array_agg(r.rating::integer), array_agg(1)
      into v_agents, v_users, v_ratings, v_signs from added r;
  elsif tg_op = 'DELETE' then
    select array_agg(r.agent_id), array_agg(r.user_id), array_agg(r.rating::integer), array_agg(-1)
      into v_agents, v_users, v_ratings, v_signs from removed r;
  else
    select array_agg(c.agent_id), array_agg(c.user_id), array_agg(c.rating), array_agg(c.sign)
      into v_agents, v_users, v_ratings, v_signs
      from removed o join added n on n.id = o.id
     cross join lateral (values (o.agent_id, o.user_id, o.rating::integer, -1), (n.agent_id, n.user_id, n.rating::integer, 1))
           c (agent_id, user_id, rating, sign)
     where (o.agent_id, o.user_id, o.rating) is distinct from (n.agent_id, n.user_id, n.rating);
  end if;
  if v_agents is not null then
    perform public.review_tallies_count(v_agents, v_users, v_ratings, v_signs);
  end if;
  return null;
end
$$;
revoke all on function public.reviews_keep_tallies() from public, anon, authenticated;

create trigger reviews_inserted_keep_tallies after insert on public.reviews
  referencing new table as added for each statement execute function public.reviews_keep_tallies();
create trigger reviews_updated_keep_tallies after update on public.reviews
  referencing old table as removed new table as added for each statement execute function public.reviews_keep_tallies();
create trigger reviews_deleted_keep_tallies after delete on public.reviews
  referencing old table as removed for each statement execute function public.reviews_keep_tallies();

-- After accounts are inserted or updated: those whose ban now ends at another time take their reviews from the old
-- end's tally to the new one's, in every agent (an inserted account: from "not banned", where its reviews written
-- before it existed were counted), and mark them banned for good or not.
create function public.user_ban_moves_review_tallies() returns trigger
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
  update public.reviews r set author_banned_for_good = (a.ends = 'infinity')
    from unnest(v_ids, v_ends) a (id, ends)
   where r.user_id = a.id and r.author_banned_for_good <> (a.ends = 'infinity');
  return null;
end
$$;
revoke all on function public.user_ban_moves_review_tallies() from public, anon, authenticated;

create trigger user_inserted_moves_review_tallies after insert on public."user"
  referencing new table as changed_users for each statement execute function public.user_ban_moves_review_tallies();
create trigger user_ban_moves_review_tallies after update on public."user"
  referencing old table as previous_users new table as changed_users for each statement execute function public.user_ban_moves_review_tallies();

-- 2. (read) ---------------------------------------------------------------------------------------- shown now
-- An agent's shown reviews now: its tally less the holds whose ban end is still ahead (a ban holds while its end is
-- ahead: public.banned_at). No row for an agent that never had a review counted. SQL, stable, without settings, so
-- the planner inlines it into the query that joins it (functions/catalog/agents.ts).
create function public.shown_review_totals(p_agent_id uuid) returns table (review_count integer, average_rating numeric)
language sql stable as $$
  select (t.reviews - h.reviews)::integer,
         round((t.rating_sum - h.rating_sum)::numeric / nullif(t.reviews - h.reviews, 0), 2)
    from public.review_tallies t
   cross join lateral (
     select coalesce(sum(x.reviews), 0) as reviews, coalesce(sum(x.rating_sum), 0) as rating_sum
       from public.review_holds x where x.agent_id = t.agent_id and x.held_until > now()
   ) h
   where t.agent_id = p_agent_id
$$;
revoke all on function public.shown_review_totals(uuid) from public, anon, authenticated;

-- 4. (reads) ---------------------------------------------------------- the Data API's reads skip the banned for good
alter policy reviews_public_read on public.reviews
  using (exists (select 1 from public.agents a where a.id = agent_id and public.agent_is_published(a.status))
         and not author_banned_for_good and public.review_shown(id));

-- Restated whole from 20261126002900 with only the flag added beside review_shown.
create or replace view public.catalog_agents with (security_invoker = true) as
  select a.id, a.slug, a.name, a.description, a.long_description, a.status, a.installs, a.created_at, a.updated_at,
         coalesce(r.review_count, 0) as review_count, r.average_rating,
         coalesce(tg.tags, '{}') as tags
  from public.agents a
  left join lateral (
    select count(*)::integer as review_count, round(avg(rv.rating)::numeric, 2) as average_rating
    from public.reviews rv where rv.agent_id = a.id and not rv.author_banned_for_good and public.review_shown(rv.id)
  ) r on true
  left join lateral (
    select array_agg(t.slug order by t.slug) as tags
    from public.agent_tags at join public.tags t on t.id = at.tag_id where at.agent_id = a.id
  ) tg on true
  where public.agent_is_published(a.status);

create or replace view public.catalog_reviews with (security_invoker = true) as
  select r.id, r.agent_id, r.user_id, r.rating, r.title, r.body, r.created_at, r.updated_at
  from public.reviews r join public.agents a on a.id = r.agent_id
  where public.agent_is_published(a.status) and not r.author_banned_for_good and public.review_shown(r.id);
