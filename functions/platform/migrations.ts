import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { rows, sql, type Database } from './db.ts';

/**
 * Applies supabase/migrations/*.sql in file order and records each in supabase_migrations.schema_migrations,
 * the table the Supabase CLI keeps, with the same columns and values (version = the timestamp prefix, name =
 * the rest of the file name), so `supabase db push` and this runner agree about what is applied.
 * Before the migrations it runs sql/bootstrap.sql, which creates what Supabase provides (roles, auth helpers)
 * only where it is missing.
 *
 * Instances that start together on one database (a deploy of several replicas) take turns: every step runs in a
 * transaction that first takes one advisory lock, and a migration that another instance applied while this one
 * waited is recognised by its history row and skipped. Without the lock, two instances applying the same migration
 * collided in the catalog (23505 on pg_type) and one of them crashed at start.
 */

export interface Migration {
  version: string;
  name: string;
  sql: string;
}

const here = new URL('.', import.meta.url).pathname;
export const migrationsDir = join(here, '../../supabase/migrations');
export const bootstrapFile = join(here, '../../sql/bootstrap.sql');

export async function loadMigrations(dir = migrationsDir): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d+_.+\.sql$/.test(f)).sort();
  return Promise.all(
    files.map(async (file) => {
      const [, version, name] = /^(\d+)_(.+)\.sql$/.exec(file)!;
      return { version: version!, name: name!, sql: await readFile(join(dir, file), 'utf8') };
    }),
  );
}

/**
 * Taken first in every migration transaction (released at its end), so instances migrate one at a time. Not inTurn
 * (db.ts), whose lock lives in a transaction of its own beside the work: a long migration could outlast that idle
 * transaction (idle_in_transaction_session_timeout) and let another instance in; here the lock is the migration's own.
 */
const TAKE_TURNS = `select pg_advisory_xact_lock(hashtextextended('supabase_migrations', 0));\n`;

// The Supabase CLI's own history table definition (pkg/migration/history.go), kept identical.
const historyTable = `
  create schema if not exists supabase_migrations;
  create table if not exists supabase_migrations.schema_migrations (version text not null primary key);
  alter table supabase_migrations.schema_migrations add column if not exists statements text[];
  alter table supabase_migrations.schema_migrations add column if not exists name text;
`;

export async function appliedVersions(database: Database): Promise<Set<string>> {
  await database.runScript(TAKE_TURNS + historyTable);
  const applied = await rows<{ version: string }>(
    database.db,
    sql`select version from supabase_migrations.schema_migrations`,
  );
  return new Set(applied.map((r) => r.version));
}

export async function migrate(
  database: Database,
  options: { migrations?: Migration[]; log?: (line: string) => void } = {},
): Promise<string[]> {
  const log = options.log ?? (() => {});
  await database.runScript(TAKE_TURNS + (await readFile(bootstrapFile, 'utf8')));
  const migrations = options.migrations ?? (await loadMigrations());
  const applied = await appliedVersions(database);
  const done: string[] = [];
  for (const m of migrations) {
    if (applied.has(m.version)) continue;
    try {
      await database.runScript(TAKE_TURNS + m.sql, [
        {
          text: 'insert into supabase_migrations.schema_migrations (version, name, statements) values ($1, $2, $3)',
          values: [m.version, m.name, splitStatements(m.sql)],
        },
      ]);
    } catch (err) {
      // Another instance applied it while we waited for the lock: our run failed (on its DDL, or at the latest on the
      // history row's key) and rolled back whole. Anything else is a real failure.
      if (!(await appliedVersions(database)).has(m.version)) throw err;
      log(`migration ${m.version}_${m.name} was applied by another instance`);
      continue;
    }
    log(`applied migration ${m.version}_${m.name}`);
    done.push(m.version);
  }
  return done;
}

/**
 * Splits a migration into statements exactly as the Supabase CLI does before it records them in
 * `schema_migrations.statements` (pkg/parser: a byte-level state machine, then `TrimRight(";")` and
 * `TrimSpace`, dropping empty ones), so both tools write identical history rows. Comments stay attached to
 * the statement that follows them. The CLI's quirks are kept on purpose: parentheses and `BEGIN ATOMIC ... END`
 * bodies are opaque to `;`, a backslash escapes the next character, and nested parentheses end at the first `)`.
 */
export function splitStatements(script: string): string[] {
  const out: string[] = [];
  let state: SplitState = { kind: 'ready' };
  let start = 0;
  const chars = Array.from(script);
  let text = '';
  for (const ch of chars) {
    text += ch;
    const next = step(state, ch, text);
    if (next === null) {
      push(out, text.slice(start));
      start = text.length;
      state = { kind: 'ready' };
    } else {
      state = next;
    }
  }
  push(out, text.slice(start));
  return out;
}

function push(out: string[], token: string) {
  const trimmed = token.replace(/;+$/, '').replace(/^[\s\u0085\u00a0]+|[\s\u0085\u00a0]+$/g, '');
  if (trimmed.length > 0) out.push(trimmed);
}

type SplitState =
  | { kind: 'ready' }
  | { kind: 'comment' }
  | { kind: 'block'; depth: number }
  | { kind: 'quote'; delimiter: string; escape: boolean }
  | { kind: 'dollar'; delimiter: string }
  | { kind: 'tag'; offset: number }
  | { kind: 'escape' }
  | { kind: 'atomic'; prev: SplitState; delimiter: string };

/** One transition of the CLI's tokenizer; `data` is everything read so far, ending with `ch`. Null emits. */
function step(s: SplitState, ch: string, data: string): SplitState | null {
  switch (s.kind) {
    case 'ready':
      switch (ch) {
        case '$':
          return { kind: 'tag', offset: data.length - 1 };
        case "'":
        case '"':
          return { kind: 'quote', delimiter: ch, escape: false };
        case '-':
          return { kind: 'comment' };
        case '/':
          return { kind: 'block', depth: 0 };
        case '\\':
          return { kind: 'escape' };
        case ';':
          return null;
        case '(':
          return { kind: 'atomic', prev: s, delimiter: ')' };
        case 'c':
        case 'C': {
          const offset = data.length - 'ATOMIC'.length;
          if (offset > 0 && data.slice(offset).toUpperCase() === 'ATOMIC' && /\s/.test(data[offset - 1]!)) {
            return { kind: 'atomic', prev: s, delimiter: 'END' };
          }
          return s;
        }
        default:
          return s;
      }
    case 'comment':
      // `--` starts a line comment that nothing escapes, like a dollar quote closed by a newline.
      return ch === '-' ? { kind: 'dollar', delimiter: '\n' } : step({ kind: 'ready' }, ch, data);
    case 'block': {
      const window = data.slice(-2);
      if (window === '/*') return { kind: 'block', depth: s.depth + 1 };
      if (s.depth === 0) return step({ kind: 'ready' }, ch, data);
      if (window === '*/') return s.depth === 1 ? { kind: 'ready' } : { kind: 'block', depth: s.depth - 1 };
      return s;
    }
    case 'quote':
      if (s.escape) {
        if (ch === s.delimiter) return { ...s, escape: false };
        return step({ kind: 'ready' }, ch, data);
      }
      return ch === s.delimiter ? { ...s, escape: true } : s;
    case 'dollar':
      return data.endsWith(s.delimiter) ? { kind: 'ready' } : s;
    case 'tag':
      if (ch === '$') return { kind: 'dollar', delimiter: data.slice(s.offset) };
      if (/[\p{L}\p{Nd}_]/u.test(ch)) return s;
      return step({ kind: 'ready' }, ch, data);
    case 'escape':
      return { kind: 'ready' };
    case 'atomic': {
      const prev = step(s.prev, ch, data) ?? s.prev;
      if (prev.kind === 'ready' && data.slice(-s.delimiter.length).toUpperCase() === s.delimiter) return { kind: 'ready' };
      return { ...s, prev };
    }
  }
}
