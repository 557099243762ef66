import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from '../../scripts/supabase-cli.ts';

/** README.md is the entry point: it links every document under docs/, and no relative link is broken. */

const readme = readFileSync(join(root, 'README.md'), 'utf8');
const links = [...readme.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((href) => !/^[a-z]+:/i.test(href));

describe('README.md', () => {
  it('links every docs/*.md', () => {
    const docs = existsSync(join(root, 'docs')) ? readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')) : [];
    for (const doc of docs) expect(links, `README.md should link docs/${doc}`).toContain(`docs/${doc}`);
  });

  it('has no broken relative links', () => {
    for (const href of links) expect(existsSync(join(dirname(join(root, 'README.md')), href)), href).toBe(true);
  });

  it('documents every variable the configuration reads', () => {
    const config = readFileSync(join(root, 'functions', 'platform', 'config.ts'), 'utf8');
    const schema = config.slice(config.indexOf('const envSchema'), config.indexOf('export interface Config'));
    const variables = [...schema.matchAll(/^ {2}([A-Z][A-Z0-9_]+):/gm)].map((m) => m[1]!);
    expect(variables.length).toBeGreaterThan(10);
    for (const v of variables) expect(readme, v).toContain(`\`${v}\``);
  });
});
