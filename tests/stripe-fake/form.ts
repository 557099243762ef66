/**
 * Parses the bracket-notation form bodies the Stripe SDK sends (`items[0][price]=price_1&metadata[userId]=u1`)
 * into nested objects. Arrays arrive as objects keyed "0", "1", ...; they are turned back into arrays.
 * Every leaf stays a string, as on the wire: the fake coerces the fields it reads.
 */
export type FormValue = string | FormValue[] | { [key: string]: FormValue };

export function parseStripeForm(text: string): Record<string, FormValue> {
  const root: Record<string, any> = {};
  if (!text) return root;
  for (const pair of text.split('&')) {
    if (!pair) continue;
    const eq = pair.indexOf('=');
    const rawKey = decodeURIComponent((eq < 0 ? pair : pair.slice(0, eq)).replace(/\+/g, ' '));
    const value = eq < 0 ? '' : decodeURIComponent(pair.slice(eq + 1).replace(/\+/g, ' '));
    const path = keyPath(rawKey);
    let node = root;
    for (let i = 0; i < path.length - 1; i++) {
      const k = path[i]!;
      node[k] ??= {};
      node = node[k];
    }
    node[path[path.length - 1]!] = value;
  }
  return arraysFromIndexes(root) as Record<string, FormValue>;
}

function keyPath(key: string): string[] {
  const head = key.split('[', 1)[0]!;
  const rest = [...key.slice(head.length).matchAll(/\[([^\]]*)\]/g)].map((m) => m[1]!);
  return [head, ...rest];
}

function arraysFromIndexes(value: any): any {
  if (typeof value !== 'object' || value === null) return value;
  const keys = Object.keys(value);
  const converted: Record<string, any> = {};
  for (const k of keys) converted[k] = arraysFromIndexes(value[k]);
  if (keys.length > 0 && keys.every((k) => /^\d+$/.test(k))) {
    return keys.sort((a, b) => Number(a) - Number(b)).map((k) => converted[k]);
  }
  return converted;
}
