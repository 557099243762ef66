import { sql, type Db } from '../../functions/platform/db.ts';
import type { TestApp } from '../support/app.ts';
import type { TestUser } from '../support/users.ts';
import { agentToken } from './support.ts';

/** Reservations over HTTP as an agent backend calls them: the user's bearer token of the path agent's client. */

export const reservePath = (agentId: string, slug: string) => `/me/usage/${agentId}/${slug}/reservations`;
export const reservationPath = (agentId: string, reservationId: string, action?: 'commit' | 'release') =>
  `/me/usage/${agentId}/reservations/${reservationId}${action ? `/${action}` : ''}`;

export async function reserve(t: TestApp, user: TestUser, agentId: string, slug: string, body: Record<string, unknown>) {
  return t.http.post(reservePath(agentId, slug), { bearer: await agentToken(t, user, agentId), json: body });
}

export async function commit(t: TestApp, user: TestUser, agentId: string, reservationId: string, amount: number) {
  return t.http.post(reservationPath(agentId, reservationId, 'commit'), { bearer: await agentToken(t, user, agentId), json: { amount } });
}

/** Release takes no body and no Content-Type. */
export async function release(t: TestApp, user: TestUser, agentId: string, reservationId: string) {
  return t.http.post(reservationPath(agentId, reservationId, 'release'), { bearer: await agentToken(t, user, agentId) });
}

export async function getReservation(t: TestApp, user: TestUser, agentId: string, reservationId: string) {
  return t.http.get(reservationPath(agentId, reservationId), { bearer: await agentToken(t, user, agentId) });
}

/** The ledger of a subscription, oldest first: event, amount, delta. */
export async function ledgerEvents(db: Db, subscriptionId: string) {
  const { rows } = await sql<{ event: string; amount: number; delta: number; reservation_id: string | null }>`
    select event, amount::int as amount, delta::int as delta, details ->> 'reservationId' as reservation_id
    from quota_ledger where subscription_id = ${subscriptionId} order by created_at, id`.execute(db);
  return rows;
}

export async function countReservations(db: Db, subscriptionId: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from usage_reservations where subscription_id = ${subscriptionId}`.execute(db);
  return rows[0]!.n;
}
