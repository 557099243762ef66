/**
 * The import rules of functions/ (functions/README.md, "Layers"), checked by `npm test`
 * (tests/foundation/architecture.once.test.ts runs `depcruise --config .dependency-cruiser.cjs functions`).
 * Type-only imports count: a cycle through types is still a cycle for the reader.
 */
const ROOMS = '(auth|catalog|metering|billing|admin|webhooks|internal|health)';

module.exports = {
  forbidden: [
    {
      name: 'no-cycles',
      comment: 'No import cycle, type-only imports included.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'rooms-through-their-index',
      comment:
        'A room imports another room only through its index.ts (its router and the services it offers), never a ' +
        'module inside it: another room\'s SQL, rows and helpers are its own.',
      severity: 'error',
      from: { path: `^functions/${ROOMS}/` },
      to: { path: `^functions/${ROOMS}/`, pathNot: ['^functions/$1/', `^functions/${ROOMS}/index\\.ts$`] },
    },
    {
      name: 'layers-know-no-room',
      comment:
        'http/ and platform/ know no room. The one exception is platform/app-types.ts, types only, which names the ' +
        'auth library type that AppDeps carries.',
      severity: 'error',
      from: { path: '^functions/(http|platform)/', pathNot: '^functions/platform/app-types\\.ts$' },
      to: { path: `^functions/${ROOMS}/` },
    },
    {
      name: 'app-types-is-types-only',
      comment: 'platform/app-types.ts imports types only, so it never loads a room.',
      severity: 'error',
      from: { path: '^functions/platform/app-types\\.ts$' },
      to: { dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'composition-root-imported-by-entries-only',
      comment: 'app.ts and deps.ts compose the rooms; nothing inside functions/ imports them back.',
      severity: 'error',
      from: { path: '^functions/', pathNot: '^functions/(app|deps)\\.ts$' },
      to: { path: '^functions/(app|deps)\\.ts$' },
    },
    {
      name: 'no-unresolvable',
      comment: 'Every relative import resolves to a file.',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: 'node_modules' },
    // Packages' subpath imports (hono/cors, better-auth/plugins) resolve through their package.json "exports".
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default', 'types'] },
  },
};
