import { spawnSync } from 'node:child_process';
import { expect, it } from 'vitest';

/**
 * The import rules of functions/ (functions/README.md, "Layers"; the rules themselves: .dependency-cruiser.cjs):
 * no cycles (type-only imports included), rooms reach each other only through their index.ts, http/ and platform/
 * know no room, nothing imports the composition root back. Runs dependency-cruiser over the source as `npx
 * depcruise --config .dependency-cruiser.cjs functions` would.
 */
it('functions/ keeps its import rules: zero violations, zero cycles', () => {
  const run = spawnSync('depcruise', ['--config', '.dependency-cruiser.cjs', '--output-type', 'json', 'functions'], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  expect(run.error).toBeUndefined();
  const result = JSON.parse(run.stdout) as {
    modules: Array<{ source: string }>;
    summary: { violations: Array<{ from: string; to: string; rule: { name: string }; cycle?: Array<{ name: string }> }> };
  };
  const violations = result.summary.violations.map(
    (v) => `${v.rule.name}: ${v.from} -> ${v.cycle ? v.cycle.map((c) => c.name).join(' -> ') : v.to}`,
  );
  expect(violations).toEqual([]);
  // The rules saw the whole application (a wrong configuration can cruise nothing and report nothing).
  const sources = result.modules.map((m) => m.source);
  expect(sources.filter((s) => s.startsWith('functions/')).length).toBeGreaterThan(100);
  for (const room of ['auth', 'catalog', 'metering', 'billing', 'admin', 'webhooks', 'internal', 'health']) {
    expect(sources, room).toContain(`functions/${room}/index.ts`);
  }
  expect(run.status).toBe(0);
});
