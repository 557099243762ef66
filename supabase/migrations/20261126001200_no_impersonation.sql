-- Platform admins no longer impersonate users (functions/auth/better-auth.ts: the admin plugin's role has no
-- `impersonate`; found by a review). An impersonation session was a session of the user, hidden from their session
-- list, that outlived the admin's demotion or ban. Those made before this release end here.
delete from public."session" where "impersonatedBy" is not null;
