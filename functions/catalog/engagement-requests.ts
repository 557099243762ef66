import { first, sql, type Db } from '../platform/db.ts';
import type { AppDeps } from '../platform/app-types.ts';
import { enforceUserAndAddressAllowance, type Asker } from '../http/rate-limit.ts';
import { userAndAddressAllowance } from '../platform/rate-limits.ts';
import type { Interaction } from './interactions.ts';
import { recordInteraction } from './interactions.ts';
import { accountGone } from './held-user.ts';
import { recipientEmails } from './notification-recipients.ts';
import { quotedLines, quotedText } from '../platform/mailer.ts';

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
/**
 * The same per client address (an IPv6 client's /64), for requests made with users' own credentials, all accounts
 * from that address together. Accounts cost nothing (sign-up needs no verified address): a script moving to a fresh
 * account whenever one's day was used up sent staff 60 demo-request mails from one address in two minutes, and would
 * have gone on at the per-minute limit all day (review 33). Three times the per-user figure, for an office or a
 * household behind one address. An agent's token is not counted per address: its address is the agent backend's,
 * shared by every user of that agent (platform/rate-limits.ts `takeUserAndAddressAllowance`).
 */
export const DEMO_REQUESTS_PER_ADDRESS_PER_DAY = 30;
export const ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY = 30;

const engagementAllowances = {
  'demo-request': userAndAddressAllowance('demo-request', 'request a demo', DEMO_REQUESTS_PER_DAY, DEMO_REQUESTS_PER_ADDRESS_PER_DAY),
  'enterprise-inquiry': userAndAddressAllowance('enterprise-inquiry', 'send an enterprise inquiry', ENTERPRISE_INQUIRIES_PER_DAY, ENTERPRISE_INQUIRIES_PER_ADDRESS_PER_DAY),
};

/**
 * Counts one demo request or enterprise inquiry for this user and credential and, for the user's own credentials, for
 * the client address; or throws 429 RATE_LIMITED.
 */
export async function takeEngagementAllowance(
  deps: Pick<AppDeps, 'database' | 'clock'>,
  kind: keyof typeof engagementAllowances,
  asker: Asker,
): Promise<void> {
  await enforceUserAndAddressAllowance(deps, asker, engagementAllowances[kind], `${kind}|${asker.userId}|${asker.agentId ?? 'own'}`);
}

export interface MailQueue {
  enqueue(db: Db, mail: { to: string; subject: string; text: string }): Promise<unknown>;
}

export interface Requester {
  userId: string;
  email: string;
  name: string;
  /**
   * The agent whose backend sent the request with the user's access token (the principal's agentId), undefined when
   * the user sent it on the marketplace. The contract lets an agent's token ask within its agent; staff must still
   * tell the user's own words from the agent's (review 27: the mail read as the user's own request).
   */
  agentId?: string | undefined;
}

/** The requester as the "user" row has them now: the address with whether its owner proved it. */
interface CheckedRequester extends Requester {
  emailVerified: boolean;
}

/**
 * Reads the requester's email, name and whether that email is verified, in one statement from the "user" row (the
 * principal does not carry the verification). Anyone may sign up with an address that is not theirs and never verify
 * it, and contract.md's "user; 202" accepts their requests; so the staff mail and the feed say whether the address was
 * proved, and an unproven one is not taken for that person's request (found by a review). A row gone meanwhile
 * (the account removed during the request) is a 401, as for any caller whose account no longer exists (the
 * interaction's foreign key would refuse it with a 500). The row is read `for key share`, what the interaction's
 * foreign key check takes, so a removal that starts after this read waits for the request's transaction and then
 * erases what it recorded (migration 20261127000200), instead of ending first and leaving the insert a 500.
 */
async function checkedRequester(db: Db, requester: Requester): Promise<CheckedRequester> {
  const row = await first<{ email: string; name: string; emailVerified: boolean }>(
    db,
    sql`select email, name, "emailVerified" as "emailVerified" from "user" where id = ${requester.userId} for key share`,
  );
  if (!row) throw accountGone();
  return { userId: requester.userId, agentId: requester.agentId, ...row, emailVerified: row.emailVerified === true };
}

/** What the feed records of who sent a request: the user, or the agent's backend with the user's token. */
const sentBy = (requester: CheckedRequester) => (requester.agentId ? { sentByAgentBackend: true } : {});

/**
 * '"Dana" <dana@example.test>', with "(address not verified)" after an address its owner never proved. The name is
 * quoted on one line: a name with line breaks wrote the mail's first line itself and pushed the marker down (review
 * 19).
 */
function requesterLine(requester: CheckedRequester): string {
  const who = requester.name ? `${quotedText(requester.name)} <${requester.email}>` : `<${requester.email}>`;
  const proved = requester.emailVerified ? who : `${who} (address not verified)`;
  return requester.agentId ? `${proved}, as sent by the agent's own backend with this user's sign-in (not by the user on the marketplace),` : proved;
}

export async function requestDemo(
  db: Db,
  mailer: MailQueue,
  input: { agent: { id: string; name: string; slug: string }; requester: Requester; message?: string | undefined; publicBaseUrl: string },
  now: Date,
): Promise<{ interaction: Interaction; notified: number }> {
  const { agent } = input;
  return db.transaction().execute(async (trx) => {
    const requester = await checkedRequester(trx, input.requester);
    const interaction = await recordInteraction(
      trx,
      {
        type: 'demo_request',
        userId: requester.userId,
        agentId: agent.id,
        metadata: {
          email: requester.email,
          name: requester.name,
          emailVerified: requester.emailVerified,
          ...sentBy(requester),
          ...(input.message ? { message: input.message } : {}),
        },
      },
      now,
    );
    const recipients = await recipientEmails(trx);
    const agentName = agent.name; // one line: the database holds every agent name to it (20261127005900)
    for (const to of recipients) {
      await mailer.enqueue(trx, {
        to,
        subject: `Demo request: ${agentName}`,
        // the service's own lines first; the requester's message last, every line of it quoted (review 74)
        text: [
          `${requesterLine(requester)} asked for a demo of ${agentName} (${agent.slug}).`,
          `Agent: ${input.publicBaseUrl}/agents/${agent.id}`,
          `Requested at: ${now.toISOString()}`,
          ...(input.message ? ['', 'Their message, as they wrote it:', quotedLines(input.message)] : []),
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
  return db.transaction().execute(async (trx) => {
    const requester = await checkedRequester(trx, input.requester);
    return recordInteraction(
      trx,
      {
        type: 'enterprise_inquiry',
        userId: requester.userId,
        agentId: input.agentId,
        metadata: {
          email: requester.email,
          name: requester.name,
          emailVerified: requester.emailVerified,
          ...sentBy(requester),
          ...(input.message ? { message: input.message } : {}),
          ...(input.companySize ? { companySize: input.companySize } : {}),
        },
      },
      now,
    );
  });
}
