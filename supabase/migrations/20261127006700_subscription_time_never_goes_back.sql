-- One subscription's events never go back in time, whichever instance (and clock) wrote them (review 95).
--
-- A subscription event's `timestamp` is the row's updated_at, which each writer sets from its own clock: instances whose
-- clocks disagree (minutes, on a bad day), or a writer that read its clock before waiting for the row's lock (a Stripe
-- event applied while the user's cancel held the row, functions/billing/subscription-state.ts), wrote a change after
-- another with an earlier time. docs/webhooks.md tells receivers to apply an event whose timestamp is equal to or later
-- than the state they hold, so the later change was dropped. Now the row's updated_at never goes back: a write with an
-- earlier clock keeps the time the row has (the events of one subscription are written under its row lock, in the
-- order they happen, so their timestamps are then in that order too; equal ones are applied). The removal's cancel
-- (20261127006600) is one such write.

create function public.subscription_time_never_goes_back() returns trigger
language plpgsql
set search_path = public, pg_temp
as $$
begin
  if new.updated_at < old.updated_at then
    new.updated_at := old.updated_at;
  end if;
  return new;
end
$$;
revoke all on function public.subscription_time_never_goes_back() from public, anon, authenticated;

create trigger subscriptions_time_never_goes_back before update on public.subscriptions
  for each row execute function public.subscription_time_never_goes_back();
