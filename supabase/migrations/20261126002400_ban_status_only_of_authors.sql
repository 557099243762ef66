-- public.review_author_in_good_standing answers only for authors of reviews (found by a review of 20261126002300).
--
-- The function is security definer over the auth library's "user" table, which the Data API's roles cannot read, and
-- they may execute it (the reviews policy and the catalog views call it as them). It answered for any user id, so
-- anyone could ask the Data API (/rpc/review_author_in_good_standing) whether an account that never wrote a review
-- is banned (a seller knows its subscribers' ids). Now an account with no review is always "in good standing": the
-- function tells no more than the reviews list shows anyway (an author's reviews missing while they are banned).
-- Restated whole with only the marked condition added.
create or replace function public.review_author_in_good_standing(p_user_id text) returns boolean
language sql stable security definer
set search_path = pg_catalog, public
as $$
  select not exists (
    select 1 from public."user" u
     where u.id = p_user_id and coalesce(u.banned, false) and (u."banExpires" is null or u."banExpires" > now())
       -- only authors (added in 20261126002400)
       and exists (select 1 from public.reviews r where r.user_id = p_user_id)
  )
$$;
