-- Review 91: a tag named for a draft was announced once the draft dropped it.
--
-- GET /tags (and the Data API since 20261127000200) lists to everyone but admins the tags a published agent carries;
-- GET /tags also listed every tag no agent carries, meant for the tags an admin makes on their own (POST /tags). But
-- createAgent and updateAgent make the tags they name too, and re-tagging leaves the old ones behind: a draft created
-- with "Project Kestrel Acquisition" and re-tagged before launch left that tag carried by nobody, and so listed to
-- every visitor. A tag now says whether an admin made it on its own (createTag): only such a tag is listed without
-- a published agent carrying it, on both the HTTP list and the Data API.
--
-- Existing tags that no agent carries are taken as made on their own: they are listed now, so marking them changes
-- nothing anyone sees (a leaked name is out already); tags some agent carries are not.

alter table public.tags add column standalone boolean not null default false;

update public.tags t set standalone = true
 where not exists (select 1 from public.agent_tags at where at.tag_id = t.id);

-- The one definition of "listed to everyone", for GET /tags (functions/catalog/tags.ts) and the Data API's policy.
create function public.tag_is_listed(p_tag_id uuid, p_standalone boolean) returns boolean
language sql stable as $$
  select p_standalone
      or exists (select 1 from public.agent_tags at join public.agents a on a.id = at.agent_id
                  where at.tag_id = p_tag_id and public.agent_is_published(a.status))
$$;

alter policy tags_public_read on public.tags using (public.tag_is_listed(id, standalone));
