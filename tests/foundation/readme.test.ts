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

  it("names every folder under tests/ in its table of the suite, and no folder that does not exist", () => {
    // Review 32: it named tests/e2e, which never existed, and left out tests/sdk and tests/webhooks.
    const named = new Set([...readme.matchAll(/`tests\/([\w-]+)`/g)].map((m) => m[1]!));
    const folders = readdirSync(join(root, 'tests'), { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    expect({ unnamed: folders.filter((f) => !named.has(f)), missing: [...named].filter((f) => !folders.includes(f)) }).toEqual({ unnamed: [], missing: [] });
  });

  it('runs the .ts examples with `npx node`, the Node 24 the project installs, whatever node the reader has', () => {
    // Review 32: `node examples/...` fails on an older node (ERR_UNKNOWN_FILE_EXTENSION for .ts).
    const files = ['README.md', join('docs', 'quickstart.md'), ...readdirSync(join(root, 'examples')).map((e) => join('examples', e, 'README.md'))];
    const bare = files
      .filter((f) => existsSync(join(root, f)))
      .flatMap((f) => [...readFileSync(join(root, f), 'utf8').matchAll(/(?<!npx )\bnode (examples\/\S+\.ts)/g)].map((m) => `${f}: ${m[1]}`));
    expect(bare).toEqual([]);
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
