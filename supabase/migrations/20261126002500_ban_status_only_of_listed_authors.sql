-- public.review_author_in_good_standing answers only for authors of reviews anyone can list (found by a review of
-- 20261126002400): a review on a draft or inactive agent, which no one but admins can list, still let the Data API
-- tell a banned author from one in good standing. Now only reviews of published agents count. Restated whole from
-- 20261126002400 with only the marked condition changed.
create or replace function public.review_author_in_good_standing(p_user_id text) returns boolean
language sql stable security definer
set search_path = pg_catalog, public
as $$
  select not exists (
    select 1 from public."user" u
     where u.id = p_user_id and coalesce(u.banned, false) and (u."banExpires" is null or u."banExpires" > now())
       -- only authors of a listed review (changed in 20261126002500)
       and exists (select 1 from public.reviews r join public.agents a on a.id = r.agent_id
                    where r.user_id = p_user_id and public.agent_is_published(a.status))
  )
$$;
