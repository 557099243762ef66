import type { Db } from '../platform/db.ts';
import type { AppDeps } from '../platform/app-types.ts';
import { enforceDailyAllowance } from '../http/rate-limit.ts';
import type { Interaction } from './interactions.ts';
import { recordInteraction } from './interactions.ts';
import { recipientEmails } from './notification-recipients.ts';

/**
 * Demo requests and enterprise inquiries: accepted for later (202). Each is an interaction attributed to the
 * caller; a demo request also mails every notification recipient through the outbox, in the same transaction,
 * so the feed entry and the mails commit together (or not at all).
 */

/**
 * Demo requests one user may make in a day (all agents together). Each mails every notification recipient, the
 * marketplace's own staff, with text the requester (or an agent backend acting for them) chose; the per-address limit
 * alone let one client with many users' tokens send staff tens of thousands of mails a day (found by an agent-side
 * review). Counted per user in PostgreSQL, the user's own credentials and each agent's token apart (no agent spends
 * the user's own allowance); then 429 RATE_LIMITED.
 */
export const DEMO_REQUESTS_PER_DAY = 10;
/**
 * Enterprise inquiries one user may send in a day (all agents together), counted the same way. Each stores up to
 * 5,000 characters in the staff's interaction feed; bounded only per address, one account stored 43,200 a day (some
 * 216 MB) and buried every real inquiry (found by a review). A buyer asks about an agent's Enterprise tier once or twice.
 */
export const ENTERPRISE_INQUIRIES_PER_DAY = 10;

const engagementAllowances = {
  'demo-request': { limit: DEMO_REQUESTS_PER_DAY, message: `You can request ${DEMO_REQUESTS_PER_DAY} demos a day; try again later` },
  'enterprise-inquiry': {
    limit: ENTERPRISE_INQUIRIES_PER_DAY,
    message: `You can send ${ENTERPRISE_INQUIRIES_PER_DAY} enterprise inquiries a day; try again later`,
  },
} as const;

/** Counts one demo request or enterprise inquiry for this user and credential, or throws 429 RATE_LIMITED. */
export async function takeEngagementAllowance(
  deps: Pick<AppDeps, 'database' | 'clock'>,
  kind: keyof typeof engagementAllowances,
  asker: { userId: string; agentId?: string | null | undefined },
): Promise<void> {
  const { limit, message } = engagementAllowances[kind];
  await enforceDailyAllowance(deps, `${kind}|${asker.userId}|${asker.agentId ?? 'own'}`, limit, message);
}

export interface MailQueue {
  enqueue(db: Db, mail: { to: string; subject: string; text: string }): Promise<unknown>;
}

export interface Requester {
  userId: string;
  email: string;
  name: string;
}

export async function requestDemo(
  db: Db,
  mailer: MailQueue,
  input: { agent: { id: string; name: string; slug: string }; requester: Requester; message?: string | undefined; publicBaseUrl: string },
  now: Date,
): Promise<{ interaction: Interaction; notified: number }> {
  const { agent, requester } = input;
  return db.transaction().execute(async (trx) => {
    const interaction = await recordInteraction(
      trx,
      {
        type: 'demo_request',
        userId: requester.userId,
        agentId: agent.id,
        metadata: { email: requester.email, name: requester.name, ...(input.message ? { message: input.message } : {}) },
      },
      now,
    );
    const recipients = await recipientEmails(trx);
    for (const to of recipients) {
      await mailer.enqueue(trx, {
        to,
        subject: `Demo request: ${agent.name}`,
        text: [
          `${requester.name || requester.email} <${requester.email}> asked for a demo of ${agent.name} (${agent.slug}).`,
          input.message ? `\nMessage:\n${input.message}\n` : '',
          `Agent: ${input.publicBaseUrl}/agents/${agent.id}`,
          `Requested at: ${now.toISOString()}`,
        ].join('\n'),
      });
    }
    return { interaction, notified: recipients.length };
  });
}

export async function createEnterpriseInquiry(
  db: Db,
  input: { agentId: string; requester: Requester; message?: string | undefined; companySize?: string | undefined },
  now: Date,
): Promise<Interaction> {
  return recordInteraction(
    db,
    {
      type: 'enterprise_inquiry',
      userId: input.requester.userId,
      agentId: input.agentId,
      metadata: {
        email: input.requester.email,
        name: input.requester.name,
        ...(input.message ? { message: input.message } : {}),
        ...(input.companySize ? { companySize: input.companySize } : {}),
      },
    },
    now,
  );
}
