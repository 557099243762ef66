-- The catalog's names are one line in the database, not only at the HTTP door (review 72 left this open).
--
-- Since review 72 the API refuses an agent, tag, tier or metric name (and a metric's unit) that breaks a line
-- (oneLineName in functions/http/router.ts, on the definition of functions/platform/text.ts). Names stored before
-- that rule could still hold line breaks, and the database's own mail, the user's "You have used all of your ..."
-- quota mail (public.metering_note_quota_used, security rule 30), writes the agent's and the metric's names into its
-- subject and body as stored: a name with a line break wrote lines of the agent's choosing into the marketplace's
-- mail. The TypeScript mails each flattened the names they read (oneLine), a copy of the rule per mail. Now:
--
-- 1. public.is_one_line(text): the characters platform/text.ts calls line-breaking (the C0 and C1 controls, the
--    line and paragraph separators, the bidirectional embeddings, overrides and isolates), spelled in SQL.
--    tests/catalog/one-line-names.test.ts checks that both spellings judge every such character, and its
--    neighbours, alike.
-- 2. Names stored before the rule are made one line as platform/text.ts's oneLine() makes them (each run of those
--    characters and white space becomes one space, the ends trimmed); a name left empty takes its slug (a tier,
--    which has none, is called 'Plan'), and a tier name that would then equal another of its agent's tier names
--    (unique per agent) keeps its id's first eight characters in brackets.
-- 3. Each name column checks it, so no writer (a route that forgets the rule, a script, an operator's SQL) stores
--    one again, and every mail may quote the names as stored.

-- 1. -----------------------------------------------------------------------------------------------------------
create function public.is_one_line(p_text text) returns boolean
language sql immutable strict parallel safe
set search_path = pg_catalog
as $$
  select p_text !~ '[\u0001-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]'
$$;

-- 2. -----------------------------------------------------------------------------------------------------------
create function pg_temp.flattened(p_text text) returns text
language sql immutable strict
as $$
  select btrim(regexp_replace(p_text, '[\s\u0001-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]+', ' ', 'g'))
$$;

update public.agents set name = coalesce(nullif(pg_temp.flattened(name), ''), slug)
 where not public.is_one_line(name);
update public.tags set name = left(coalesce(nullif(pg_temp.flattened(name), ''), slug), 60)
 where not public.is_one_line(name);
update public.metric_definitions set name = coalesce(nullif(pg_temp.flattened(name), ''), slug)
 where not public.is_one_line(name);
update public.metric_definitions set unit = nullif(pg_temp.flattened(unit), '')
 where not public.is_one_line(unit);
-- A tier's new name is compared with what each other tier of its agent is called after this: its name as it is when
-- that is one line already, else its own new base name (both changed alike take the suffix). Comparing with the other's
-- flattened name alone let two names that flatten to nothing both become 'Plan', and the unique name of an agent's
-- tiers aborted the migration (review 81). Corrected in place: a database this migration already ran on keeps what it
-- wrote (migrations are tracked by version), and one it aborted on can now be migrated.
update public.tiers t
   set name = coalesce(nullif(pg_temp.flattened(t.name), ''), 'Plan')
              || case when exists (select 1 from public.tiers o
                                    where o.agent_id = t.agent_id and o.id <> t.id
                                      and case when public.is_one_line(o.name) then o.name
                                               else coalesce(nullif(pg_temp.flattened(o.name), ''), 'Plan') end
                                          = coalesce(nullif(pg_temp.flattened(t.name), ''), 'Plan'))
                      then ' (' || left(t.id::text, 8) || ')' else '' end
 where not public.is_one_line(t.name);

drop function pg_temp.flattened(text);

-- 3. -----------------------------------------------------------------------------------------------------------
alter table public.agents add constraint agents_name_one_line check (public.is_one_line(name));
alter table public.tags add constraint tags_name_one_line check (public.is_one_line(name));
alter table public.tiers add constraint tiers_name_one_line check (public.is_one_line(name));
alter table public.metric_definitions add constraint metric_definitions_name_one_line check (public.is_one_line(name)),
  add constraint metric_definitions_unit_one_line check (public.is_one_line(unit));
