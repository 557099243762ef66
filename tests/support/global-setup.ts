import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import { openPostgres } from '../../functions/platform/db.ts';
import { openPGlite } from '../../functions/platform/pglite.ts';
import { migrate } from '../../functions/platform/migrations.ts';
import { withDatabase } from './databases.ts';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    pgTemplate: string;
    pgliteSnapshot: string;
  }
}

/**
 * Runs once per vitest project: migrates a template database that every test file copies.
 * postgres tier: TEST_PG_URL names a server (scripts/test.ts starts a throwaway one or uses DATABASE_URL).
 * pglite tier: migrates an in-memory PGlite once and writes its data-dir snapshot for the workers to load.
 */
export default async function setup(project: TestProject) {
  if (project.name === 'postgres') {
    const serverUrl = process.env.TEST_PG_URL;
    if (!serverUrl) throw new Error('TEST_PG_URL is not set (run tests with npm test)');
    const template = `tmpl_${process.pid}_${Date.now()}`;
    const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${template}`);
    const database = openPostgres(withDatabase(serverUrl, template), { max: 1 });
    try {
      await migrate(database);
    } finally {
      await database.close();
    }
    project.provide('pgTemplate', template);
    return async () => {
      await admin.unsafe(`drop database if exists ${template} with (force)`);
      await admin.end();
    };
  }
  const database = await openPGlite(undefined);
  await migrate(database);
  const dump = await database.pglite.dumpDataDir('none');
  const dir = join(process.cwd(), '.test-artifacts');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `pglite-snapshot-${process.pid}.tar`);
  writeFileSync(file, Buffer.from(await dump.arrayBuffer()));
  await database.close();
  project.provide('pgliteSnapshot', file);
  return () => rmSync(file, { force: true });
}
