-- OAuth clients of agents, and the record of issued access tokens that lets us revoke a whole grant.
--
-- Every agent owns exactly one confidential OAuth client ("oauthClient", the library's table from
-- 20261122000200_auth.sql), created in the same transaction as the agent (functions/auth/agent-clients.ts).

create table public.agent_oauth_clients (
  agent_id uuid primary key references public.agents (id) on delete cascade,
  client_id text not null references "oauthClient" ("clientId") on delete cascade,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint agent_oauth_clients_client_key unique (client_id)
);
alter table public.agent_oauth_clients enable row level security;

-- JWT access tokens cannot be recalled, and the library keeps no row for them. To revoke the live access
-- tokens of a grant (a reused authorization code, a reused or revoked refresh token), the token endpoint
-- wrapper records each access token it hands out, with the authorization code it descends from (the library's
-- hashed code id, also kept on its refresh tokens); revoking copies the live ones into public.revoked_tokens as
-- `jti:<jti>`, which the Authenticator already checks on every request.
-- Rows are useless once the token expires (10 h) and are purged as new ones arrive.
create table public.oauth_issued_access_tokens (
  jti text primary key,
  client_id text not null references "oauthClient" ("clientId") on delete cascade,
  user_id text not null references "user" ("id") on delete cascade,
  session_id text,
  authorization_code_id text,
  expires_at timestamptz(3) not null,
  created_at timestamptz(3) not null default now()
);
create index oauth_issued_access_tokens_family_idx on public.oauth_issued_access_tokens (client_id, user_id, expires_at);
create index oauth_issued_access_tokens_code_idx on public.oauth_issued_access_tokens (authorization_code_id)
  where authorization_code_id is not null;
create index oauth_issued_access_tokens_expires_at_idx on public.oauth_issued_access_tokens (expires_at);
alter table public.oauth_issued_access_tokens enable row level security;
