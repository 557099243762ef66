import { join } from 'node:path';
import ts from 'typescript';

/**
 * Checks a JSON object against the type of a Stripe API object as the pinned `stripe` package declares it.
 *
 * Stripe publishes no OpenAPI package on the npm registry; the `stripe` package is generated from its OpenAPI
 * document (node_modules/stripe/OPENAPI_VERSION names the revision), and its declarations carry the schemas:
 * a property without `?` is one the API always sends (nullable ones as `| null`), enums are literal unions,
 * expandable references are `string | Object`. This reads those declarations with the TypeScript compiler and
 * walks a value against them: every property the type requires is present, every property present is declared
 * (nothing invented), and each value has the declared type, recursively.
 */

const root = join(import.meta.dirname, '..', '..');

export interface ShapeProblem {
  path: string;
  problem: string;
}

export class StripeSpec {
  readonly #checker: ts.TypeChecker;
  readonly #types = new Map<string, ts.Type>();

  /** `names` are type names under the Stripe namespace, e.g. `Subscription`, `Checkout.Session`. */
  constructor(names: string[]) {
    const file = join(root, 'tests', 'stripe-fake', '__stripe_spec_types__.ts');
    const source = `import type Stripe from 'stripe';\n${names.map((n, i) => `export type T${i} = Stripe.${n};`).join('\n')}\n`;
    const options: ts.CompilerOptions = {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: [],
    };
    const host = ts.createCompilerHost(options);
    const readFile = host.readFile.bind(host);
    const fileExists = host.fileExists.bind(host);
    host.readFile = (f) => (f === file ? source : readFile(f));
    host.fileExists = (f) => f === file || fileExists(f);
    const getSourceFile = host.getSourceFile.bind(host);
    host.getSourceFile = (f, lang, ...rest) => (f === file ? ts.createSourceFile(f, source, lang) : getSourceFile(f, lang, ...rest));
    const program = ts.createProgram([file], options, host);
    this.#checker = program.getTypeChecker();
    const sf = program.getSourceFile(file)!;
    const diagnostics = ts.getPreEmitDiagnostics(program, sf);
    if (diagnostics.length) throw new Error(ts.flattenDiagnosticMessageText(diagnostics[0]!.messageText, '\n'));
    sf.statements.forEach((statement, i) => {
      if (!ts.isTypeAliasDeclaration(statement)) return;
      this.#types.set(names[i - 1]!, this.#checker.getTypeAtLocation(statement.name));
    });
  }

  /** Problems of `value` as a `name` (empty when it conforms). */
  check(name: string, value: unknown): ShapeProblem[] {
    const type = this.#types.get(name);
    if (!type) throw new Error(`Stripe.${name} was not loaded`);
    const problems: ShapeProblem[] = [];
    this.#walk(value, type, name, problems);
    return problems;
  }

  /** The properties a type requires (no `?`), for tests that want to see what the spec demands. */
  requiredProperties(name: string): string[] {
    const type = this.#types.get(name)!;
    return this.#checker
      .getPropertiesOfType(type)
      .filter((p) => !(p.flags & ts.SymbolFlags.Optional))
      .map((p) => p.name);
  }

  #describe(type: ts.Type): string {
    return this.#checker.typeToString(type, undefined, ts.TypeFormatFlags.NoTruncation);
  }

  #walk(value: unknown, type: ts.Type, path: string, problems: ShapeProblem[]): void {
    const f = type.flags;
    if (f & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) return;
    if (type.isUnion()) {
      this.#walkUnion(value, type, path, problems);
      return;
    }
    const fail = (problem: string) => problems.push({ path, problem });
    if (type.getSymbol()?.name === 'DecimalImpl' || type.aliasSymbol?.name === 'Decimal' || type.getSymbol()?.name === 'Decimal') {
      // decimal_string in the OpenAPI document: the SDK parses it into a Decimal, on the wire it is a string
      return void ((typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value)) || fail(`expected a decimal string, got ${JSON.stringify(value)}`));
    }
    if (type.isIntersection()) {
      // e.g. OtherString (`string & {}`): Stripe's open enums accept any string
      for (const member of type.types) this.#walk(value, member, path, problems);
      return;
    }
    if (f & ts.TypeFlags.Null) return void (value === null || fail(`expected null, got ${JSON.stringify(value)}`));
    if (f & ts.TypeFlags.Undefined) return void (value === undefined || fail(`expected nothing, got ${JSON.stringify(value)}`));
    if (type.isStringLiteral()) return void (value === type.value || fail(`expected '${type.value}', got ${JSON.stringify(value)}`));
    if (type.isNumberLiteral()) return void (value === type.value || fail(`expected ${type.value}, got ${JSON.stringify(value)}`));
    if (f & ts.TypeFlags.BooleanLiteral) {
      const expected = this.#describe(type) === 'true';
      return void (value === expected || fail(`expected ${expected}, got ${JSON.stringify(value)}`));
    }
    if (f & ts.TypeFlags.String) return void (typeof value === 'string' || fail(`expected a string, got ${JSON.stringify(value)}`));
    if (f & ts.TypeFlags.Number) return void ((typeof value === 'number' && Number.isFinite(value)) || fail(`expected a number, got ${JSON.stringify(value)}`));
    if (f & ts.TypeFlags.Boolean) return void (typeof value === 'boolean' || fail(`expected a boolean, got ${JSON.stringify(value)}`));
    if (this.#checker.isArrayType(type)) {
      if (!Array.isArray(value)) return void fail(`expected an array, got ${JSON.stringify(value)}`);
      const [element] = this.#checker.getTypeArguments(type as ts.TypeReference);
      value.forEach((item, i) => this.#walk(item, element!, `${path}[${i}]`, problems));
      return;
    }
    if (f & ts.TypeFlags.Object) {
      const emptyObject = this.#checker.getPropertiesOfType(type).length === 0 && !this.#checker.getIndexTypeOfType(type, ts.IndexKind.String);
      if (emptyObject) return void (value === null || value === undefined ? fail(`expected a value, got ${JSON.stringify(value)}`) : undefined);
      if (typeof value !== 'object' || value === null || Array.isArray(value)) return void fail(`expected ${this.#describe(type)}, got ${JSON.stringify(value)}`);
      const record = value as Record<string, unknown>;
      const properties = this.#checker.getPropertiesOfType(type);
      const index = this.#checker.getIndexTypeOfType(type, ts.IndexKind.String);
      const declared = new Map(properties.map((p) => [p.name, p]));
      for (const [name, symbol] of declared) {
        const propType = this.#checker.getTypeOfSymbol(symbol);
        // methods (e.g. on ApiList helpers) are not data
        if (this.#checker.getSignaturesOfType(propType, ts.SignatureKind.Call).length) continue;
        if (!(name in record)) {
          if (!(symbol.flags & ts.SymbolFlags.Optional)) problems.push({ path: `${path}.${name}`, problem: 'required by the spec, missing' });
          continue;
        }
        this.#walk(record[name], propType, `${path}.${name}`, problems);
      }
      for (const name of Object.keys(record)) {
        if (declared.has(name)) continue;
        if (index) this.#walk(record[name], index, `${path}.${name}`, problems);
        else problems.push({ path: `${path}.${name}`, problem: 'not in the spec' });
      }
      return;
    }
    fail(`unsupported type ${this.#describe(type)}`);
  }

  /** A value conforms to a union when it conforms to one member; object members are narrowed by literal tags first. */
  #walkUnion(value: unknown, type: ts.UnionType, path: string, problems: ShapeProblem[]): void {
    let members = type.types;
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
      const tagged = members.filter((m) => this.#tagsMatch(m, value as Record<string, unknown>));
      if (tagged.length) members = tagged;
    }
    // a value that is there is judged against the members that describe a value, not against `null`
    if (value !== null && value !== undefined) members = members.filter((m) => !(m.flags & (ts.TypeFlags.Null | ts.TypeFlags.Undefined)));
    let best: ShapeProblem[] | undefined;
    for (const member of members) {
      const attempt: ShapeProblem[] = [];
      this.#walk(value, member, path, attempt);
      if (attempt.length === 0) return;
      if (!best || attempt.length < best.length) best = attempt;
    }
    problems.push(...(best ?? [{ path, problem: `matches no member of ${this.#describe(type)}` }]));
  }

  /** False when an object member declares `object`/`type` as a string literal the value contradicts. */
  #tagsMatch(member: ts.Type, value: Record<string, unknown>): boolean {
    if (!(member.flags & ts.TypeFlags.Object) || this.#checker.isArrayType(member)) return false;
    for (const tag of ['object', 'type', 'deleted']) {
      const symbol = member.getProperty(tag);
      if (!symbol) continue;
      const tagType = this.#checker.getTypeOfSymbol(symbol);
      const literals = (tagType.isUnion() ? tagType.types : [tagType]).filter((t) => t.isStringLiteral() || t.flags & ts.TypeFlags.BooleanLiteral);
      if (!literals.length) continue;
      const allowed = literals.map((t) => (t.isStringLiteral() ? t.value : this.#describe(t) === 'true'));
      if (!(tag in value) && tag === 'deleted') return false;
      if (tag in value && !allowed.includes(value[tag] as never)) return false;
    }
    return true;
  }
}
