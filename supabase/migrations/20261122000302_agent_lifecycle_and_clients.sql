-- An agent's OAuth client follows the agent's life.
--
-- * Deactivated (deleteAgent sets status `inactive`): the client is disabled, so users can no longer authorize
--   it and its backend can no longer redeem codes, refresh or introspect; the access tokens it holds are revoked.
--   Reactivating the agent enables the client again (users' refresh tokens work again; revoked access tokens
--   stay revoked).
-- * Removed (the agent row is deleted): its live access tokens are revoked and the client goes too, and with it,
--   by the library's cascades, its refresh tokens and consents.

create function public.sync_agent_oauth_client_status() returns trigger language plpgsql as $$
declare
  client text;
begin
  select client_id into client from public.agent_oauth_clients where agent_id = new.id;
  if client is null then
    return new;
  end if;
  update "oauthClient" set "disabled" = (new.status = 'inactive'), "updatedAt" = now() where "clientId" = client;
  if new.status = 'inactive' then
    insert into public.revoked_tokens (key, expires_at)
    select 'jti:' || jti, expires_at
      from public.oauth_issued_access_tokens
     where client_id = client and expires_at > now()
    on conflict (key) do nothing;
  end if;
  return new;
end
$$;
create trigger agent_status_syncs_oauth_client after update of status on public.agents
  for each row when ((old.status = 'inactive') is distinct from (new.status = 'inactive'))
  execute function public.sync_agent_oauth_client_status();

create function public.delete_oauth_client_of_removed_agent() returns trigger language plpgsql as $$
begin
  insert into public.revoked_tokens (key, expires_at)
  select 'jti:' || jti, expires_at
    from public.oauth_issued_access_tokens
   where client_id = old.client_id and expires_at > now()
  on conflict (key) do nothing;
  delete from "oauthClient" where "clientId" = old.client_id;
  return old;
end
$$;
create trigger agent_removal_deletes_oauth_client after delete on public.agent_oauth_clients
  for each row execute function public.delete_oauth_client_of_removed_agent();
