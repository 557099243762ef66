import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { errorStatus } from '../../functions/http/errors.ts';
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

  it('links docs/errors.md, which explains every code of the envelope with its status', () => {
    const errors = readFileSync(join(root, 'docs', 'errors.md'), 'utf8');
    const rows = errors.split('\n').filter((line) => line.startsWith('| '));
    const missing = Object.entries(errorStatus).filter(([code, status]) => !rows.some((row) => row.startsWith(`| ${status} |`) && row.includes(`\`${code}\``)));
    expect(missing).toEqual([]);
  });

  it('links to docs whose own relative links, anchors included, all resolve', () => {
    const broken: string[] = [];
    const docs = readdirSync(join(root, 'docs'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.md'));
    expect(docs).toEqual(expect.arrayContaining(['quickstart.md', 'errors.md', join('internals', 'metering.md')]));
    for (const doc of docs) {
      const from = join(root, 'docs', doc);
      const text = readFileSync(from, 'utf8');
      for (const [, href, anchor] of text.matchAll(/\]\(([^)#\s]*)(?:#([^)\s]*))?\)/g)) {
        if (/^[a-z]+:/i.test(href!)) continue;
        const target = href ? join(dirname(from), href) : from;
        if (!existsSync(target)) broken.push(`${doc}: ${href}`);
        else if (anchor && target.endsWith('.md') && !headingAnchors(readFileSync(target, 'utf8')).has(anchor)) broken.push(`${doc}: ${href}#${anchor}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('documents every variable the configuration reads', () => {
    const config = readFileSync(join(root, 'functions', 'platform', 'config.ts'), 'utf8');
    const schema = config.slice(config.indexOf('const envSchema'), config.indexOf('export interface Config'));
    const variables = [...schema.matchAll(/^ {2}([A-Z][A-Z0-9_]+):/gm)].map((m) => m[1]!);
    expect(variables.length).toBeGreaterThan(10);
    for (const v of variables) expect(readme, v).toContain(`\`${v}\``);
  });
});

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  for (const [, title] of markdown.replace(/```[\s\S]*?```/g, '').matchAll(/^#{1,6} (.+)$/gm)) {
    anchors.add(title!.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-'));
  }
  return anchors;
}
