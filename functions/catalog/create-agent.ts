import type { z } from '@hono/zod-openapi';
import { provisionAgentClient } from '../auth/index.ts';
import type { Clock } from '../platform/clock.ts';
import type { Db } from '../platform/db.ts';
import { replaceContent } from './agent-content.ts';
import { getAgent, insertAgentRow, type Agent } from './agents.ts';
import type { createAgentBody } from './schemas.ts';
import { setAgentTags } from './tags.ts';

/**
 * Creates an agent with its tags, capabilities and steps, and provisions its OAuth client, all in one
 * transaction: an agent never exists without its client. The client secret is returned here once and
 * never again (rotateAgentClientSecret issues a new one).
 */
export async function createAgent(
  deps: { clock: Clock },
  db: Db,
  input: z.infer<typeof createAgentBody>,
): Promise<Agent & { oauthClient: { clientId: string; clientSecret: string } }> {
  const now = deps.clock.now();
  return db.transaction().execute(async (trx) => {
    const agentId = await insertAgentRow(trx, input, now);
    if (input.tags?.length) await setAgentTags(trx, agentId, input.tags, now);
    if (input.capabilities?.length) await replaceContent(trx, now, { kind: 'capabilities', agentId, items: input.capabilities });
    if (input.steps?.length) await replaceContent(trx, now, { kind: 'steps', agentId, items: input.steps });
    const oauthClient = await provisionAgentClient(deps, trx, {
      agentId,
      name: input.name,
      redirectUris: input.redirectUris,
      postLogoutRedirectUris: input.postLogoutRedirectUris,
    });
    const agent = await getAgent(trx, { id: agentId }, true);
    return { ...agent, oauthClient };
  });
}
