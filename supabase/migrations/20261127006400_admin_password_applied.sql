-- ADMIN_PASSWORD is applied once per value, not at every start.
--
-- At start, ADMIN_EMAIL / ADMIN_PASSWORD make that account a usable admin (functions/auth/ensure-admin.ts). The
-- password was set whenever it did not match ADMIN_PASSWORD, and setting it takes the account back as a password reset
-- does (every session, token and consent ends). So an admin who changed their password (one that leaked, say) had it
-- set back to ADMIN_PASSWORD and was signed out at the next restart, and on the edge at every cold isolate, which
-- Supabase starts whenever it likes. Now the start remembers which ADMIN_PASSWORD it applied to which account (an HMAC
-- of the value under AUTH_SECRET, never the value) and sets the password only when the value is new for that account:
-- changing ADMIN_PASSWORD and restarting still changes the password; a restart alone changes nothing. Keyed by the
-- account's id, so an account made anew with the address (after a removal) is repaired again.

create table public.admin_password_applied (
  user_id text primary key references public."user" (id) on delete cascade,
  fingerprint text not null,
  applied_at timestamptz(3) not null
);
alter table public.admin_password_applied enable row level security;
-- The service's own: no policy, nothing granted (on Supabase the default privileges grant new tables, hence the revoke).
revoke all on public.admin_password_applied from anon, authenticated;
