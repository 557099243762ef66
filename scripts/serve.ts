import { serve } from '@hono/node-server';
import { createApp } from '../functions/app.ts';
import { buildDeps } from '../functions/deps.ts';
import { ConfigError, loadConfig } from '../functions/platform/config.ts';
import { createLogger } from '../functions/platform/logger.ts';
import { migrate } from '../functions/platform/migrations.ts';
import { localDocsScript, openConfiguredDatabase, withPersistedSecret } from '../functions/platform/node-runtime.ts';
import { withDemoAdmin } from './demo-admin.ts';

/** Node entry: `npm start`. Migrates the database, seeds the demo catalog in development, then listens. */
async function main() {
  const logger = createLogger();
  let config;
  let demoAdmin: ReturnType<typeof withDemoAdmin>['generated'];
  try {
    const admin = withDemoAdmin(withPersistedSecret(process.env));
    demoAdmin = admin.generated;
    config = loadConfig(admin.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  const database = await openConfiguredDatabase(config);
  const applied = await migrate(database, { log: (line) => logger.info(line) });
  logger.info('database ready', { kind: database.kind, appliedMigrations: applied.length });

  const deps = await buildDeps({ config, database, logger, docsScript: localDocsScript() });
  const app = createApp(deps);
  await deps.startup?.();

  const server = serve({ fetch: app.fetch, port: config.port, hostname: '0.0.0.0' }, (info) => {
    logger.info('listening', { url: config.publicBaseUrl, port: info.port, database: database.kind });
    console.log(`\n  Agent Marketplace API listening on ${config.publicBaseUrl}  (docs: ${config.publicBaseUrl}/docs)\n`);
    if (demoAdmin?.created) {
      console.log(`  Demo admin created: ${demoAdmin.email} / ${demoAdmin.password}  (kept in ${demoAdmin.file})\n`);
    } else if (demoAdmin) {
      console.log(`  Demo admin: ${demoAdmin.email}  (password in ${demoAdmin.file})\n`);
    }
  });

  const shutdown = async (signal: string) => {
    logger.info('shutting down', { signal });
    server.close();
    await database.close();
    process.exit(0);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
