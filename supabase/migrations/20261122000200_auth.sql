-- Identity: the tables of Better Auth (users, sessions, accounts, verification tokens; admin, organization,
-- jwt and oauth-provider plugins), plus what the marketplace adds around them: row-level security, foreign
-- keys from the core tables to users, the sign-up interaction trigger, the token revocation list and the
-- mail outbox.
--
-- The CREATE TABLE / CREATE INDEX statements below are the library's own, compiled once by
-- scripts/generate-auth-schema.ts (better-auth 1.7.5, getMigrations().compileMigrations()) and pasted verbatim:
-- the library checks at run time that the database matches what it expects, and any drift answers 500.
-- Table and column names are therefore camelCase and quoted, as the library writes them.

-- ---------------------------------------------------------------------------------------------------------
-- Better Auth tables (generated)
-- ---------------------------------------------------------------------------------------------------------
create table "user" ("id" text not null primary key, "name" text not null, "email" text not null unique, "emailVerified" boolean not null, "image" text, "createdAt" timestamptz default CURRENT_TIMESTAMP not null, "updatedAt" timestamptz default CURRENT_TIMESTAMP not null, "role" text, "banned" boolean, "banReason" text, "banExpires" timestamptz);
create table "session" ("id" text not null primary key, "expiresAt" timestamptz not null, "token" text not null unique, "createdAt" timestamptz default CURRENT_TIMESTAMP not null, "updatedAt" timestamptz not null, "ipAddress" text, "userAgent" text, "userId" text not null references "user" ("id") on delete cascade, "impersonatedBy" text, "activeOrganizationId" text);
create table "account" ("id" text not null primary key, "accountId" text not null, "providerId" text not null, "userId" text not null references "user" ("id") on delete cascade, "accessToken" text, "refreshToken" text, "idToken" text, "accessTokenExpiresAt" timestamptz, "refreshTokenExpiresAt" timestamptz, "scope" text, "password" text, "createdAt" timestamptz default CURRENT_TIMESTAMP not null, "updatedAt" timestamptz not null);
create table "verification" ("id" text not null primary key, "identifier" text not null, "value" text not null, "expiresAt" timestamptz not null, "createdAt" timestamptz default CURRENT_TIMESTAMP not null, "updatedAt" timestamptz default CURRENT_TIMESTAMP not null);
create table "organization" ("id" text not null primary key, "name" text not null, "slug" text not null unique, "logo" text, "createdAt" timestamptz not null, "metadata" text);
create table "member" ("id" text not null primary key, "organizationId" text not null references "organization" ("id") on delete cascade, "userId" text not null references "user" ("id") on delete cascade, "role" text not null, "createdAt" timestamptz not null);
create table "invitation" ("id" text not null primary key, "organizationId" text not null references "organization" ("id") on delete cascade, "email" text not null, "role" text, "status" text not null, "expiresAt" timestamptz not null, "createdAt" timestamptz default CURRENT_TIMESTAMP not null, "inviterId" text not null references "user" ("id") on delete cascade);
create table "jwks" ("id" text not null primary key, "publicKey" text not null, "privateKey" text not null, "createdAt" timestamptz not null, "expiresAt" timestamptz, "alg" text, "crv" text);
create table "oauthClient" ("id" text not null primary key, "clientId" text not null unique, "clientSecret" text, "clientDiscoveryId" text, "disabled" boolean, "skipConsent" boolean, "enableEndSession" boolean, "subjectType" text, "scopes" jsonb, "clientCredentialsScopes" jsonb, "userId" text references "user" ("id") on delete cascade, "createdAt" timestamptz, "updatedAt" timestamptz, "name" text, "uri" text, "icon" text, "contacts" jsonb, "tos" text, "policy" text, "softwareId" text, "softwareVersion" text, "softwareStatement" text, "redirectUris" jsonb not null, "postLogoutRedirectUris" jsonb, "backchannelLogoutUri" text, "backchannelLogoutSessionRequired" boolean, "tokenEndpointAuthMethod" text, "applicationType" text, "jwks" text, "jwksUri" text, "grantTypes" jsonb, "responseTypes" jsonb, "requirePKCE" boolean, "dpopBoundAccessTokens" boolean, "referenceId" text, "metadata" jsonb);
create table "oauthResource" ("id" text not null primary key, "identifier" text not null unique, "name" text not null, "accessTokenTtl" integer, "refreshTokenTtl" integer, "signingAlgorithm" text, "signingKeyId" text, "allowedScopes" jsonb, "customClaims" jsonb, "dpopBoundAccessTokensRequired" boolean, "disabled" boolean, "createdAt" timestamptz, "updatedAt" timestamptz, "policyVersion" integer, "metadata" jsonb);
create table "oauthClientResource" ("id" text not null primary key, "clientId" text not null references "oauthClient" ("clientId") on delete cascade, "resourceId" text not null references "oauthResource" ("identifier") on delete cascade, "metadata" jsonb, "createdAt" timestamptz);
create table "oauthRefreshToken" ("id" text not null primary key, "token" text not null unique, "clientId" text not null references "oauthClient" ("clientId") on delete cascade, "sessionId" text references "session" ("id") on delete set null, "userId" text not null references "user" ("id") on delete cascade, "referenceId" text, "authorizationCodeId" text, "resources" jsonb, "requestedUserInfoClaims" jsonb, "expiresAt" timestamptz not null, "createdAt" timestamptz not null, "revoked" timestamptz, "rotatedAt" timestamptz, "rotationReplayResponse" text, "rotationReplayExpiresAt" timestamptz, "authTime" timestamptz, "confirmation" jsonb, "scopes" jsonb not null);
create table "oauthAccessToken" ("id" text not null primary key, "token" text not null unique, "clientId" text not null references "oauthClient" ("clientId") on delete cascade, "sessionId" text references "session" ("id") on delete set null, "userId" text references "user" ("id") on delete cascade, "referenceId" text, "authorizationCodeId" text, "resources" jsonb, "requestedUserInfoClaims" jsonb, "refreshId" text references "oauthRefreshToken" ("id") on delete cascade, "expiresAt" timestamptz not null, "createdAt" timestamptz not null, "revoked" timestamptz, "confirmation" jsonb, "scopes" jsonb not null);
create table "oauthConsent" ("id" text not null primary key, "clientId" text not null references "oauthClient" ("clientId") on delete cascade, "userId" text references "user" ("id") on delete cascade, "referenceId" text, "resources" jsonb, "requestedUserInfoClaims" jsonb, "scopes" jsonb not null, "createdAt" timestamptz not null, "updatedAt" timestamptz not null);
create table "oauthClientAssertion" ("id" text not null primary key, "expiresAt" timestamptz not null);
create index "session_userId_idx" on "session" ("userId");
create index "account_userId_idx" on "account" ("userId");
create index "verification_identifier_idx" on "verification" ("identifier");
create index "member_organizationId_idx" on "member" ("organizationId");
create index "member_userId_idx" on "member" ("userId");
create index "invitation_organizationId_idx" on "invitation" ("organizationId");
create index "invitation_email_idx" on "invitation" ("email");
create index "oauthClient_userId_idx" on "oauthClient" ("userId");
create index "oauthClientResource_clientId_idx" on "oauthClientResource" ("clientId");
create index "oauthClientResource_resourceId_idx" on "oauthClientResource" ("resourceId");
create index "oauthRefreshToken_clientId_idx" on "oauthRefreshToken" ("clientId");
create index "oauthRefreshToken_sessionId_idx" on "oauthRefreshToken" ("sessionId");
create index "oauthRefreshToken_userId_idx" on "oauthRefreshToken" ("userId");
create index "oauthRefreshToken_authorizationCodeId_idx" on "oauthRefreshToken" ("authorizationCodeId");
create index "oauthAccessToken_clientId_idx" on "oauthAccessToken" ("clientId");
create index "oauthAccessToken_sessionId_idx" on "oauthAccessToken" ("sessionId");
create index "oauthAccessToken_userId_idx" on "oauthAccessToken" ("userId");
create index "oauthAccessToken_authorizationCodeId_idx" on "oauthAccessToken" ("authorizationCodeId");
create index "oauthAccessToken_refreshId_idx" on "oauthAccessToken" ("refreshId");
create index "oauthConsent_clientId_idx" on "oauthConsent" ("clientId");
create index "oauthConsent_userId_idx" on "oauthConsent" ("userId");
create unique index "oauthClientResource_clientId_resourceId_uidx" on "oauthClientResource" ("clientId", "resourceId");

-- ---------------------------------------------------------------------------------------------------------
-- Marketplace rules on the auth tables
-- ---------------------------------------------------------------------------------------------------------

-- Roles of the marketplace. The admin plugin refuses unknown roles too; this keeps any other writer honest.
alter table "user" add constraint user_role_known check ("role" is null or "role" in ('user', 'platform_admin'));
create index user_created_at_id_idx on "user" ("createdAt" desc, id desc);

-- Row-level security on every auth table, with no policy: only the service (table owner) reads or writes
-- them. On Supabase this keeps PostgREST's anon/authenticated roles away from password hashes, sessions,
-- signing keys and client secrets.
alter table "user" enable row level security;
alter table "session" enable row level security;
alter table "account" enable row level security;
alter table "verification" enable row level security;
alter table "organization" enable row level security;
alter table "member" enable row level security;
alter table "invitation" enable row level security;
alter table "jwks" enable row level security;
alter table "oauthClient" enable row level security;
alter table "oauthResource" enable row level security;
alter table "oauthClientResource" enable row level security;
alter table "oauthRefreshToken" enable row level security;
alter table "oauthAccessToken" enable row level security;
alter table "oauthConsent" enable row level security;
alter table "oauthClientAssertion" enable row level security;
revoke all on "user", "session", "account", "verification", "organization", "member", "invitation", "jwks",
  "oauthClient", "oauthResource", "oauthClientResource", "oauthRefreshToken", "oauthAccessToken", "oauthConsent",
  "oauthClientAssertion" from anon, authenticated;

-- Core tables point at users.
-- Subscriptions (and through them usage counters) belong to their user: deleting a user is erasure, so they
-- go with it. Stripe keeps the billing record; a user who merely must lose access is banned, not deleted.
alter table public.subscriptions
  add constraint subscriptions_user_fk foreign key (user_id) references "user" (id) on delete cascade;
-- The interaction feed is analytics history: a deleted user's rows stay, anonymous.
alter table public.interactions
  add constraint interactions_user_fk foreign key (user_id) references "user" (id) on delete set null;
create index interactions_user_idx on public.interactions (user_id);

-- Exactly one `user_signup` interaction per user. A trigger, not an after-sign-up hook: the hook runs after
-- the library's commit and may fail or be retried; the trigger commits with the user row or not at all, and
-- the unique index makes any second write a no-op.
create unique index interactions_one_signup_per_user_idx on public.interactions (user_id) where type = 'user_signup';

create function public.record_user_signup() returns trigger language plpgsql as $$
begin
  insert into public.interactions (type, user_id, metadata, created_at)
  values ('user_signup', new.id, jsonb_build_object('email', new.email, 'name', new.name), coalesce(new."createdAt", now()))
  on conflict (user_id) where type = 'user_signup' do nothing;
  return new;
end
$$;
create trigger user_signup_interaction after insert on "user"
  for each row execute function public.record_user_signup();

-- ---------------------------------------------------------------------------------------------------------
-- Revocation list for JWT access tokens (checked by the Authenticator on every bearer request, in the same
-- query as the user row). Keys:
--   jti:<jti>     one revoked access token            (written by the OAuth revocation endpoint)
--   grant:<sid>   every token of a revoked grant      (written on grant revocation and refresh-token reuse)
--   user:<id>     every token of the user issued before `issued_before` (written here when a user is banned,
--                 so tokens from before a ban stay dead after an unban)
-- Rows are only needed until the last token they cover expires (access tokens live 10 h): `expires_at`.
-- ---------------------------------------------------------------------------------------------------------
create table public.revoked_tokens (
  key text primary key,
  expires_at timestamptz(3) not null,
  -- null: every token with this key; else only tokens issued (iat) before this instant
  issued_before timestamptz(3),
  created_at timestamptz(3) not null default now()
);
create index revoked_tokens_expires_at_idx on public.revoked_tokens (expires_at);
alter table public.revoked_tokens enable row level security;

-- A ban (through our endpoint, the library's /admin/ban-user or /admin/update-user) ends every way the user
-- is signed in: sessions, OAuth refresh and access tokens, and live JWT access tokens (via the revocation
-- list, since a JWT cannot be recalled).
create function public.revoke_credentials_of_banned_user() returns trigger language plpgsql as $$
begin
  delete from "session" where "userId" = new.id;
  delete from "oauthAccessToken" where "userId" = new.id;
  delete from "oauthRefreshToken" where "userId" = new.id;
  insert into public.revoked_tokens (key, expires_at, issued_before)
  values ('user:' || new.id, now() + interval '10 hours 5 minutes', now())
  on conflict (key) do update set issued_before = excluded.issued_before, expires_at = excluded.expires_at;
  return new;
end
$$;
create trigger user_banned_revoke_credentials after update of banned on "user"
  for each row when (new.banned is true and old.banned is distinct from true)
  execute function public.revoke_credentials_of_banned_user();

-- ---------------------------------------------------------------------------------------------------------
-- Mail outbox (functions/platform/mailer.ts): a mail is written in the caller's transaction and delivered
-- (SMTP) or logged by the delivery loop. Rows stay as the record of what was sent.
-- ---------------------------------------------------------------------------------------------------------
create table public.mail_outbox (
  id uuid primary key default gen_random_uuid(),
  to_address text not null,
  subject text not null,
  text_body text not null,
  html_body text,
  status text not null default 'pending' check (status in ('pending', 'sent', 'logged', 'failed')),
  attempts integer not null default 0,
  last_error text,
  next_attempt_at timestamptz(3) not null default now(),
  created_at timestamptz(3) not null default now(),
  sent_at timestamptz(3)
);
create index mail_outbox_due_idx on public.mail_outbox (next_attempt_at) where status = 'pending';
create index mail_outbox_to_idx on public.mail_outbox (to_address, created_at desc);
alter table public.mail_outbox enable row level security;
