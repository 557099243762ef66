/**
 * Signing secrets of webhook endpoints.
 *
 * A Standard Webhooks secret is `whsec_` + base64 of random bytes, and the service needs the bytes themselves to
 * compute each message's HMAC, so a one-way hash (as for passwords or API keys) cannot be stored. It is stored
 * encrypted instead: AES-256-GCM under a key derived from AUTH_SECRET with HKDF-SHA-256, with the endpoint id as
 * associated data. Why not plain text: the secrets are what agent backends trust to tell a real marketplace event
 * from a forged one, and a database dump, a backup, a log of a query or a read-only SQL role should not hand them
 * out. The AUTH_SECRET is not in the database, so the database alone never reveals a secret; the endpoint id as
 * associated data means a ciphertext copied onto another endpoint's row does not decrypt.
 *
 * The API shows a secret once, in the answer that created it (create, rotate), and nothing logs it.
 * WebCrypto only: the same code runs on Node and Deno.
 */

const encoder = new TextEncoder();
const SECRET_BYTES = 32;
const FORMAT = 'v1';

/** A new secret, `whsec_<base64 of 32 random bytes>`. */
export function newWebhookSecret(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(SECRET_BYTES));
  return `whsec_${toBase64(bytes)}`;
}

export class SecretBox {
  #key: Promise<CryptoKey>;

  constructor(authSecret: string) {
    this.#key = (async () => {
      const material = await crypto.subtle.importKey('raw', encoder.encode(authSecret), 'HKDF', false, ['deriveKey']);
      return crypto.subtle.deriveKey(
        { name: 'HKDF', hash: 'SHA-256', salt: encoder.encode('agent-marketplace'), info: encoder.encode('webhook-endpoint-secret:v1') },
        material,
        { name: 'AES-GCM', length: 256 },
        false,
        ['encrypt', 'decrypt'],
      );
    })();
  }

  /** `v1.<iv>.<ciphertext>`, both base64url; `endpointId` is bound as associated data. */
  async seal(secret: string, endpointId: string): Promise<string> {
    const iv = crypto.getRandomValues(new Uint8Array(12));
    const sealed = await crypto.subtle.encrypt(
      { name: 'AES-GCM', iv, additionalData: encoder.encode(endpointId) },
      await this.#key,
      encoder.encode(secret),
    );
    return `${FORMAT}.${toBase64Url(iv)}.${toBase64Url(new Uint8Array(sealed))}`;
  }

  /** The secret, or throws SecretUnreadable (another AUTH_SECRET, another endpoint's row, or a damaged value). */
  async open(sealed: string, endpointId: string): Promise<string> {
    const [format, iv, data, extra] = sealed.split('.');
    if (format !== FORMAT || !iv || !data || extra !== undefined) throw new SecretUnreadable();
    try {
      const plain = await crypto.subtle.decrypt(
        { name: 'AES-GCM', iv: fromBase64Url(iv), additionalData: encoder.encode(endpointId) },
        await this.#key,
        fromBase64Url(data),
      );
      return new TextDecoder().decode(plain);
    } catch {
      throw new SecretUnreadable();
    }
  }
}

export class SecretUnreadable extends Error {
  constructor() {
    super("The endpoint's signing secret cannot be decrypted (was AUTH_SECRET changed?): rotate the endpoint's secret");
    this.name = 'SecretUnreadable';
  }
}

function toBase64(bytes: Uint8Array): string {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

function toBase64Url(bytes: Uint8Array): string {
  return toBase64(bytes).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function fromBase64Url(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}
