-- An account whose email changes is unverified until the owner of the new address follows the link mailed to it
-- (found by a hostile review of the auth library's routes).
--
-- The library's admin update-user writes `data.email` and leaves "emailVerified" as it was, so an admin asked to
-- "fix" a verified user's address (by someone posing as its owner, or a typo) made the account the verified owner of
-- an address nobody there ever controlled: it accepted an organization invitation made out to that address, and an
-- anonymous purchase paid with that address attached to it at once instead of mailing the address a claim link
-- (contract.md, revision 2: verified owners). The library's own change-email flow is disabled; this holds for every
-- writer of the row, present or future, in one place.
--
-- The account's pending password-reset links end with the change too (found by the review of this change): a reset
-- verifies the account's address (the link proves the mailbox it was sent to), so a link mailed to the OLD address
-- and used after the change made the account the verified owner of the new one, which nobody opened a link for.
create function public.changed_email_is_unverified() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if new.email is distinct from old.email then
    new."emailVerified" := false;
    delete from "verification" where identifier like 'reset-password:%' and value = new.id;
  end if;
  return new;
end
$$;
revoke all on function public.changed_email_is_unverified() from public, anon, authenticated;

create trigger changed_email_is_unverified before update of email on "user"
  for each row execute function public.changed_email_is_unverified();
