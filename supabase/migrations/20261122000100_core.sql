-- Core tables every domain builds on: agents, pricing tiers, subscriptions, metric definitions, tier quotas,
-- usage counters and the interaction feed. Later migrations add each domain's own tables and functions.
--
-- Conventions:
--   * ids are uuid (gen_random_uuid, core in Postgres 13+); user ids are Better Auth's text ids.
--   * created_at is timestamptz(3): millisecond precision, so a JS Date round-trips exactly and keyset
--     pagination cursors over (created_at, id) never skip or repeat a row.
--   * row-level security is enabled on every table. The service connects as the table owner; the `anon` and
--     `authenticated` roles (PostgREST) only see what the policies and public views allow.

create table public.agents (
  id uuid primary key default gen_random_uuid(),
  slug text not null,
  name text not null,
  description text not null default '',
  long_description text,
  status text not null default 'draft' check (status in ('draft', 'active', 'coming_soon', 'inactive')),
  installs integer not null default 0 check (installs >= 0),
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint agents_slug_key unique (slug),
  constraint agents_slug_format check (slug ~ '^[a-z0-9]+(-[a-z0-9]+)*$')
);
create index agents_created_at_id_idx on public.agents (created_at desc, id desc);

create table public.tiers (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  name text not null,
  price_cents integer not null check (price_cents >= 0),
  currency text not null default 'usd' check (currency ~ '^[a-z]{3}$'),
  interval text not null default 'month' check (interval in ('month', 'year')),
  is_public boolean not null default true,
  features jsonb not null default '[]'::jsonb,
  stripe_product_id text,
  stripe_price_id text,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint tiers_agent_name_key unique (agent_id, name)
);
create index tiers_agent_idx on public.tiers (agent_id);
create unique index tiers_stripe_price_idx on public.tiers (stripe_price_id) where stripe_price_id is not null;

create table public.subscriptions (
  id uuid primary key default gen_random_uuid(),
  user_id text not null,
  agent_id uuid not null references public.agents (id),
  tier_id uuid not null references public.tiers (id),
  status text not null check (status in ('active', 'past_due', 'canceled', 'incomplete')),
  current_period_start timestamptz(3) not null,
  current_period_end timestamptz(3) not null,
  cancel_at_period_end boolean not null default false,
  canceled_at timestamptz(3),
  pending_tier_id uuid references public.tiers (id),
  pending_change_kind text check (pending_change_kind in ('upgrade', 'downgrade')),
  stripe_customer_id text,
  stripe_subscription_id text,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint subscriptions_period_order check (current_period_end > current_period_start),
  constraint subscriptions_pending_pair check ((pending_tier_id is null) = (pending_change_kind is null))
);
-- At most one non-canceled subscription per (user, agent): the contract's invariant, enforced by the database.
create unique index subscriptions_one_live_idx on public.subscriptions (user_id, agent_id) where status <> 'canceled';
create unique index subscriptions_stripe_idx on public.subscriptions (stripe_subscription_id)
  where stripe_subscription_id is not null;
create index subscriptions_user_idx on public.subscriptions (user_id);
create index subscriptions_agent_idx on public.subscriptions (agent_id, created_at desc, id desc);
create index subscriptions_created_at_id_idx on public.subscriptions (created_at desc, id desc);

create table public.metric_definitions (
  id uuid primary key default gen_random_uuid(),
  agent_id uuid not null references public.agents (id) on delete cascade,
  slug text not null check (slug ~ '^[a-z0-9]+([_-][a-z0-9]+)*$'),
  name text not null,
  kind text not null check (kind in ('fixed', 'rolling')),
  unit text,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint metric_definitions_agent_slug_key unique (agent_id, slug)
);

-- One row per (tier, metric). quota_limit null = unlimited, 0 = deny; no row = deny.
create table public.tier_quotas (
  tier_id uuid not null references public.tiers (id) on delete cascade,
  metric_id uuid not null references public.metric_definitions (id) on delete restrict,
  quota_limit bigint check (quota_limit >= 0),
  updated_at timestamptz(3) not null default now(),
  primary key (tier_id, metric_id)
);

-- Counters per (subscription, metric, period). Fixed metrics use one epoch period ('-infinity');
-- rolling metrics are keyed by the billing period start, so a new period begins at zero with no job.
create table public.usage_counters (
  subscription_id uuid not null references public.subscriptions (id) on delete cascade,
  metric_id uuid not null references public.metric_definitions (id) on delete restrict,
  period_start timestamptz(3) not null,
  used bigint not null default 0 check (used >= 0),
  updated_at timestamptz(3) not null default now(),
  primary key (subscription_id, metric_id, period_start)
);

create table public.interactions (
  id uuid primary key default gen_random_uuid(),
  type text not null check (type in ('user_signup', 'demo_request', 'enterprise_inquiry', 'waitlist_signup', 'install')),
  user_id text,
  agent_id uuid references public.agents (id) on delete set null,
  metadata jsonb not null default '{}'::jsonb,
  created_at timestamptz(3) not null default now()
);
create index interactions_created_at_id_idx on public.interactions (created_at desc, id desc);
create index interactions_type_created_at_id_idx on public.interactions (type, created_at desc, id desc);

alter table public.agents enable row level security;
alter table public.tiers enable row level security;
alter table public.subscriptions enable row level security;
alter table public.metric_definitions enable row level security;
alter table public.tier_quotas enable row level security;
alter table public.usage_counters enable row level security;
alter table public.interactions enable row level security;

-- Public catalog reads (PostgREST roles): listed agents, public tiers, metric definitions and quotas of public tiers.
create policy agents_public_read on public.agents for select to anon, authenticated
  using (status in ('active', 'coming_soon'));
create policy tiers_public_read on public.tiers for select to anon, authenticated
  using (is_public and exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
create policy metric_definitions_public_read on public.metric_definitions for select to anon, authenticated
  using (exists (select 1 from public.agents a where a.id = agent_id and a.status in ('active', 'coming_soon')));
create policy tier_quotas_public_read on public.tier_quotas for select to anon, authenticated
  using (exists (select 1 from public.tiers t where t.id = tier_id and t.is_public));
-- A signed-in user reads their own subscriptions and counters.
create policy subscriptions_owner_read on public.subscriptions for select to authenticated
  using (user_id = (auth.jwt() ->> 'sub'));
create policy usage_counters_owner_read on public.usage_counters for select to authenticated
  using (exists (select 1 from public.subscriptions s where s.id = subscription_id and s.user_id = (auth.jwt() ->> 'sub')));
-- interactions: no policy, so only the service (owner) reads or writes them.

grant select on public.agents, public.tiers, public.metric_definitions, public.tier_quotas to anon, authenticated;
grant select on public.subscriptions, public.usage_counters to authenticated;
