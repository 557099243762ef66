import { serve } from '@hono/node-server';
import { agentBackend } from './app.ts';

/**
 * npx node examples/agent-backend/server.ts, with the agent's details in the environment (examples/agent-backend/README.md).
 */
const need = (name: string) => {
  const value = process.env[name];
  if (!value) {
    console.error(`set ${name} (see examples/agent-backend/README.md)`);
    process.exit(2);
  }
  return value;
};
const port = Number(process.env.PORT ?? 8788);
const app = agentBackend({
  marketplaceUrl: process.env.MARKETPLACE_URL ?? 'http://127.0.0.1:8000',
  agentId: need('AGENT_ID'),
  clientId: need('CLIENT_ID'),
  clientSecret: need('CLIENT_SECRET'),
  publicUrl: process.env.PUBLIC_URL ?? `http://127.0.0.1:${port}`,
  metric: process.env.METRIC ?? 'api-calls',
});
serve({ fetch: app.fetch, port, hostname: '127.0.0.1' }, () => console.log(`example agent backend on http://127.0.0.1:${port}`));
