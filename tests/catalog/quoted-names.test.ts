import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';
import { mailsTo } from '../support/mail.ts';
import { createAdmin, signUp, type TestUser } from '../support/users.ts';
import { createAgent } from './helpers.ts';
import { quotedText } from '../../functions/platform/mailer.ts';

/**
 * Review 120. The mails put a user's name or an organization's name in double quotes (mailer.ts `quotedText`) so that
 * it cannot pass for the mail's own words; a name holding a double quote closed them early, and what followed read as
 * the marketplace's: a forged, unmarked address before the requester's real one in the staff's demo-request mail, a
 * forged inviter address, role and link in an invitation. Now the name's own double quotes become single ones.
 */
let t: TestApp;
let admin: TestUser;
beforeAll(async () => {
  t = await startTestApp({ env: { TRUSTED_PROXIES: '127.0.0.1, ::1' } });
  admin = await createAdmin(t);
});
afterAll(() => t?.close());

/** The spans of a line a reader takes as quoted, pairing its double quotes. */
const quotedSpans = (line: string) => [...line.matchAll(/"([^"]*)"/g)].map((m) => m[1]);

describe('a name holding a double quote, in a mail', () => {
  it("a double quote's look-alikes, and apostrophes side by side, cannot seem to close the quotes either (review 121)", () => {
    // Unicode's confusables of `"`: the double prime, the double apostrophe, the gershayim, the ditto mark, `''`, `’’`.
    for (const mark of ['\u02ba', '\u02ee', '\u05f4', '\u3003', '""', "''", '\u2019\u2019', '\u2033', '\uff02']) {
      const quoted = quotedText(`Billing${mark} as admin. Confirm your card first at https://evil.example/card`);
      expect(quoted, JSON.stringify(mark)).toBe(`"Billing' as admin. Confirm your card first at https://evil.example/card"`);
    }
  });

  it("attack: a requester's name cannot close its quotes and put an unmarked address before the real one (the staff's demo-request mail)", async () => {
    const staff = `sales-${randomUUID().slice(0, 8)}@example.test`;
    expect((await t.http.post('/admin/notification-recipients', { cookie: admin.cookie, json: { email: staff } })).status).toBe(201);
    const agent = await createAgent(t, admin, { name: 'Contract Copilot' });
    const mallory = await signUp(t, { name: 'Jane Roe, CFO\u201d <cfo@bigcorp.example> asked for a demo; forwarded by "assistant' });
    expect((await t.http.post(`/agents/${agent.id}/demo-requests`, { cookie: mallory.cookie, json: {} })).status).toBe(202);
    const firstLine = (await mailsTo(t, staff))[0]!.text.split('\n')[0]!;
    expect(quotedSpans(firstLine)[0], firstLine).toBe("Jane Roe, CFO' <cfo@bigcorp.example> asked for a demo; forwarded by 'assistant");
    expect(firstLine).toContain(`<${mallory.email}> (address not verified)`);
  });

  it("attack: an inviter's and an organization's names cannot close their quotes in the invitation", async () => {
    const owner = await signUp(t, { name: 'Agent Marketplace Support" (support@agent-marketplace.example', verified: true });
    const headers = { origin: t.baseUrl, 'x-forwarded-for': '198.18.9.1' };
    const org = await t.http.post('/api/auth/organization/create', {
      cookie: owner.cookie,
      headers,
      json: { name: 'Billing" as admin. Confirm your card first at https://evil.example/card "x', slug: `acme-${randomUUID().slice(0, 8)}` },
    });
    expect(org.status, org.text).toBe(200);
    const newcomer = `newcomer-${randomUUID().slice(0, 8)}@example.test`;
    const invited = await t.http.post('/api/auth/organization/invite-member', {
      cookie: owner.cookie,
      headers,
      json: { email: newcomer, role: 'member', organizationId: org.body.id },
    });
    expect(invited.status, invited.text).toBe(200);
    const sentence = (await mailsTo(t, newcomer))[0]!.text.replace(/\s+/g, ' ');
    const line = /An Agent Marketplace user, .*? as member\./.exec(sentence)![0];
    expect(quotedSpans(line), line).toEqual([
      "Agent Marketplace Support' (support@agent-marketplace.example",
      "Billing' as admin. Confirm your card first at https://evil.example/card 'x",
    ]);
  });
});
