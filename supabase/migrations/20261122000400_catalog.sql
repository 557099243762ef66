-- Catalog content around the core `agents` and `tiers` tables: capabilities, how-it-works steps, changelog,
-- videos, tags, reviews, installs, waitlist and the notification recipients of demo requests; full-text search
-- over agents; and the public catalog views PostgREST serves to `anon` and `authenticated`.
--
-- The service connects as the table owner and enforces access in its handlers; RLS is on for every table so
-- PostgREST roles only ever see what the policies below allow (published agents, public tiers, their content).

-- Full-text search over name + description ('simple' config: agent names are product names, not English
-- prose, and 'simple' matches prefixes of brand names predictably on every Postgres build).
alter table public.agents
  add column search tsvector generated always as (
    setweight(to_tsvector('simple'::regconfig, coalesce(name, '')), 'A') ||
    setweight(to_tsvector('simple'::regconfig, coalesce(description, '')), 'B')
  ) stored;
create index agents_search_idx on public.agents using gin (search);
-- The public list filters on status and walks (created_at, id): one index serves both.
create index agents_status_created_at_id_idx on public.agents (status, created_at desc, id desc);

create table public.agent_capabilities (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  position integer not null check (position >= 1),
  title text not null check (length(title) between 1 and 200),
  description text not null default '',
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);
create index agent_capabilities_agent_idx on public.agent_capabilities (agent_id, position, created_at, id);

create table public.agent_steps (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  position integer not null check (position >= 1),
  title text not null check (length(title) between 1 and 200),
  description text not null default '',
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);
create index agent_steps_agent_idx on public.agent_steps (agent_id, position, created_at, id);

create table public.agent_changelog_entries (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  version text not null check (length(version) between 1 and 50),
  title text,
  body text not null default '',
  created_at timestamptz(3) not null default now()
);
create index agent_changelog_entries_agent_idx on public.agent_changelog_entries (agent_id, created_at desc, id desc);

create table public.agent_videos (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  url text not null,
  title text,
  created_at timestamptz(3) not null default now()
);
create index agent_videos_agent_idx on public.agent_videos (agent_id, created_at desc, id desc);

create table public.tags (
  id uuid primary key default gen_random_uuid(),
  slug text not null check (slug ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
  name text not null check (length(name) between 1 and 60),
  created_at timestamptz(3) not null default now(),
  constraint tags_slug_key unique (slug)
);
create index tags_created_at_id_idx on public.tags (created_at desc, id desc);

create table public.agent_tags (
  agent_id uuid not null references public.agents (id) on delete cascade,
  tag_id uuid not null references public.tags (id) on delete cascade,
  primary key (agent_id, tag_id)
);
create index agent_tags_tag_idx on public.agent_tags (tag_id, agent_id);

-- One review per (user, agent): upserts target this constraint, so parallel upserts stay one row.
create table public.reviews (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  user_id text not null,
  rating smallint not null check (rating between 1 and 5),
  title text,
  body text,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint reviews_agent_user_key unique (agent_id, user_id)
);
create index reviews_agent_created_at_id_idx on public.reviews (agent_id, created_at desc, id desc);

-- Installs are counted once per user: agents.installs is incremented only when this insert adds a row.
create table public.agent_installs (
  agent_id uuid not null references public.agents (id) on delete cascade,
  user_id text not null,
  created_at timestamptz(3) not null default now(),
  primary key (agent_id, user_id)
);
create index agent_installs_user_idx on public.agent_installs (user_id);

-- Emails are stored lower-cased, so the unique pair is case-insensitive.
create table public.waitlist_entries (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  email text not null check (email = lower(email) and position('@' in email) > 1),
  user_id text,
  created_at timestamptz(3) not null default now(),
  constraint waitlist_entries_agent_email_key unique (agent_id, email)
);

create table public.notification_recipients (
  id uuid primary key default gen_random_uuid(),
  email text not null check (email = lower(email) and position('@' in email) > 1),
  name text,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint notification_recipients_email_key unique (email)
);

alter table public.agent_capabilities enable row level security;
alter table public.agent_steps enable row level security;
alter table public.agent_changelog_entries enable row level security;
alter table public.agent_videos enable row level security;
alter table public.tags enable row level security;
alter table public.agent_tags enable row level security;
alter table public.reviews enable row level security;
alter table public.agent_installs enable row level security;
alter table public.waitlist_entries enable row level security;
alter table public.notification_recipients enable row level security;

-- Content of published agents (active or coming soon) is public, like the agents policy in the core migration.
create policy agent_capabilities_public_read on public.agent_capabilities for select to anon, authenticated
  using (exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
create policy agent_steps_public_read on public.agent_steps for select to anon, authenticated
  using (exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
create policy agent_changelog_entries_public_read on public.agent_changelog_entries for select to anon, authenticated
  using (exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
create policy agent_videos_public_read on public.agent_videos for select to anon, authenticated
  using (exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
create policy tags_public_read on public.tags for select to anon, authenticated using (true);
create policy agent_tags_public_read on public.agent_tags for select to anon, authenticated
  using (exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
create policy reviews_public_read on public.reviews for select to anon, authenticated
  using (exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
-- A signed-in user sees their own installs and waitlist entries; nobody else's.
create policy agent_installs_owner_read on public.agent_installs for select to authenticated
  using (user_id = (auth.jwt() ->> 'sub'));
create policy waitlist_entries_owner_read on public.waitlist_entries for select to authenticated
  using (user_id = (auth.jwt() ->> 'sub'));
-- notification_recipients: no policy, so only the service (owner) reads or writes them.

grant select on public.agent_capabilities, public.agent_steps, public.agent_changelog_entries, public.agent_videos,
  public.tags, public.agent_tags, public.reviews to anon, authenticated;
grant select on public.agent_installs, public.waitlist_entries to authenticated;

-- Public catalog views for PostgREST. security_invoker: the caller's role and the policies above apply, so a
-- view can never show more than its tables allow; the where clauses state the same rule for readers of the view.
create view public.catalog_agents with (security_invoker = true) as
  select a.id, a.slug, a.name, a.description, a.long_description, a.status, a.installs, a.created_at, a.updated_at,
         coalesce(r.review_count, 0) as review_count, r.average_rating,
         coalesce(tg.tags, '{}') as tags
  from public.agents a
  left join lateral (
    select count(*)::integer as review_count, round(avg(rating)::numeric, 2) as average_rating
    from public.reviews where agent_id = a.id
  ) r on true
  left join lateral (
    select array_agg(t.slug order by t.slug) as tags
    from public.agent_tags at join public.tags t on t.id = at.tag_id where at.agent_id = a.id
  ) tg on true
  where a.status in ('active', 'coming_soon');

create view public.catalog_tiers with (security_invoker = true) as
  select t.id, t.agent_id, t.name, t.price_cents, t.currency, t.interval, t.features, t.created_at
  from public.tiers t join public.agents a on a.id = t.agent_id
  where t.is_public and a.status in ('active', 'coming_soon');

create view public.catalog_capabilities with (security_invoker = true) as
  select c.id, c.agent_id, c.position, c.title, c.description
  from public.agent_capabilities c join public.agents a on a.id = c.agent_id
  where a.status in ('active', 'coming_soon');

create view public.catalog_steps with (security_invoker = true) as
  select s.id, s.agent_id, s.position, s.title, s.description
  from public.agent_steps s join public.agents a on a.id = s.agent_id
  where a.status in ('active', 'coming_soon');

create view public.catalog_changelog with (security_invoker = true) as
  select e.id, e.agent_id, e.version, e.title, e.body, e.created_at
  from public.agent_changelog_entries e join public.agents a on a.id = e.agent_id
  where a.status in ('active', 'coming_soon');

create view public.catalog_videos with (security_invoker = true) as
  select v.id, v.agent_id, v.url, v.title, v.created_at
  from public.agent_videos v join public.agents a on a.id = v.agent_id
  where a.status in ('active', 'coming_soon');

create view public.catalog_reviews with (security_invoker = true) as
  select r.id, r.agent_id, r.user_id, r.rating, r.title, r.body, r.created_at, r.updated_at
  from public.reviews r join public.agents a on a.id = r.agent_id
  where a.status in ('active', 'coming_soon');

grant select on public.catalog_agents, public.catalog_tiers, public.catalog_capabilities, public.catalog_steps,
  public.catalog_changelog, public.catalog_videos, public.catalog_reviews to anon, authenticated;
