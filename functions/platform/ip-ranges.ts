/**
 * IP addresses and CIDR ranges (IPv4 and IPv6), for TRUSTED_PROXIES: which peers may tell us the client's address.
 * An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, how Node reports IPv4 peers on a dual-stack socket) counts as
 * the IPv4 address it carries.
 */

export interface IpRange {
  version: 4 | 6;
  /** Network address bytes (4 or 16). */
  bytes: Uint8Array;
  prefix: number;
  /** As written in the configuration. */
  text: string;
}

/** The bytes of an IP address (4 for IPv4 and IPv4-mapped IPv6, 16 for IPv6), or undefined when it is not one. */
export function parseIp(text: string): Uint8Array | undefined {
  // Some proxies write a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`); the zone of a link-local address goes too.
  const s = text
    .trim()
    .replace(/^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/, '$1')
    .replace(/^\[(.*)\](?::\d{1,5})?$/, '$1')
    .replace(/%[\w.-]+$/, '');
  const v4 = parseIpv4(s);
  if (v4) return v4;
  const v6 = parseIpv6(s);
  if (!v6) return undefined;
  const mapped = v6.slice(0, 10).every((b) => b === 0) && v6[10] === 0xff && v6[11] === 0xff;
  return mapped ? v6.slice(12) : v6;
}

function parseIpv4(s: string): Uint8Array | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(s);
  if (!m) return undefined;
  const bytes = m.slice(1).map(Number);
  if (bytes.some((b) => b > 255)) return undefined;
  return Uint8Array.from(bytes);
}

function parseIpv6(s: string): Uint8Array | undefined {
  if (!/^[0-9a-fA-F:.]+$/.test(s) || s.split('::').length > 2) return undefined;
  let text = s;
  const lastColon = text.lastIndexOf(':');
  if (lastColon < 0) return undefined;
  if (text.includes('.', lastColon)) {
    // An IPv4 tail (`::ffff:192.0.2.1`) is two 16-bit groups.
    const v4 = parseIpv4(text.slice(lastColon + 1));
    if (!v4) return undefined;
    text = `${text.slice(0, lastColon + 1)}${((v4[0]! << 8) | v4[1]!).toString(16)}:${((v4[2]! << 8) | v4[3]!).toString(16)}`;
  }
  const groupsOf = (part: string) => (part === '' ? [] : part.split(':'));
  const compressed = text.includes('::');
  const [head, tail] = compressed ? (text.split('::') as [string, string]) : [text, ''];
  const groups = [groupsOf(head), groupsOf(tail)];
  const given = groups[0]!.length + groups[1]!.length;
  if (compressed ? given > 7 : given !== 8) return undefined;
  if (!groups.flat().every((g) => /^[0-9a-fA-F]{1,4}$/.test(g))) return undefined;
  const words = [...groups[0]!, ...Array<string>(8 - given).fill('0'), ...groups[1]!].map((g) => parseInt(g, 16));
  const bytes = new Uint8Array(16);
  words.forEach((w, i) => {
    bytes[i * 2] = w >> 8;
    bytes[i * 2 + 1] = w & 0xff;
  });
  return bytes;
}

/** `192.0.2.7`, `10.0.0.0/8`, `2001:db8::/32`; undefined when it is neither an address nor a range. */
export function parseIpRange(text: string): IpRange | undefined {
  const [addr, prefixText, extra] = text.trim().split('/');
  if (addr === undefined || extra !== undefined) return undefined;
  const bytes = parseIp(addr);
  if (!bytes) return undefined;
  const max = bytes.length * 8;
  let prefix = max;
  if (prefixText !== undefined) {
    if (!/^\d{1,3}$/.test(prefixText)) return undefined;
    prefix = Number(prefixText);
    // An IPv4-mapped range (`::ffff:10.0.0.0/104`) is the IPv4 range it maps.
    if (bytes.length === 4 && addr.includes(':')) prefix -= 96;
    if (prefix < 0 || prefix > max) return undefined;
  }
  return { version: bytes.length === 4 ? 4 : 6, bytes, prefix, text: text.trim() };
}

/** TRUSTED_PROXIES: a comma-separated list; returns the ranges, or the entries that are not addresses or ranges. */
export function parseIpRangeList(text: string): { ranges: IpRange[]; invalid: string[] } {
  const ranges: IpRange[] = [];
  const invalid: string[] = [];
  for (const entry of text.split(',').map((e) => e.trim()).filter(Boolean)) {
    const range = parseIpRange(entry);
    if (range) ranges.push(range);
    else invalid.push(entry);
  }
  return { ranges, invalid };
}

export function inRange(ip: Uint8Array, range: IpRange): boolean {
  if (ip.length !== range.bytes.length) return false;
  let bits = range.prefix;
  for (let i = 0; i < ip.length && bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((ip[i]! & mask) !== (range.bytes[i]! & mask)) return false;
  }
  return true;
}

/** Whether an address (text) lies in one of the ranges; false for anything that is not an address. */
export function isInRanges(ip: string, ranges: readonly IpRange[]): boolean {
  if (ranges.length === 0) return false;
  const bytes = parseIp(ip);
  return bytes !== undefined && ranges.some((r) => inRange(bytes, r));
}

/** The canonical text of an address (IPv4 dotted, IPv6 lower-case full groups), or undefined when not one. */
export function normalizeIp(text: string): string | undefined {
  const bytes = parseIp(text);
  if (!bytes) return undefined;
  if (bytes.length === 4) return bytes.join('.');
  const words: string[] = [];
  for (let i = 0; i < 16; i += 2) words.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return words.join(':');
}

/**
 * Whom a per-address limit counts: an IPv4 address itself, but an IPv6 address's /64 network. One home line, VM or
 * container host is given a whole /64 (2^64 addresses) and may use any of them, so counting single IPv6 addresses gave
 * such a client a new allowance with every address (found by a review: 12 sign-ups under a limit of 3). Anything that
 * is not an address is counted as itself.
 */
export function rateLimitSubject(address: string): string {
  const bytes = parseIp(address);
  if (!bytes || bytes.length === 4) return address;
  const words: string[] = [];
  for (let i = 0; i < 8; i += 2) words.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return `${words.join(':')}::/64`;
}
