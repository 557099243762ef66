/**
 * The `consent_code` of our contract is the library's signed authorization query (`oauth_query`: the original
 * authorize parameters plus `exp` and an HMAC `sig` made with AUTH_SECRET), carried as one opaque base64url
 * value. Nothing is stored: the library verifies the signature and the expiry when the consent is posted, so a
 * forged, altered or stale code is refused by the same check as an altered `oauth_query`.
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/** Longest consent code we accept (the signed query of a normal authorize request is well under 2 KiB). */
const MAX_CONSENT_CODE_LENGTH = 8192;

export function encodeConsentCode(signedQuery: string): string {
  let binary = '';
  for (const byte of encoder.encode(signedQuery)) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** The signed query inside a consent code, or undefined when it is not one of ours in shape. */
export function decodeConsentCode(code: string): string | undefined {
  if (code.length === 0 || code.length > MAX_CONSENT_CODE_LENGTH || !/^[A-Za-z0-9_-]+$/.test(code)) return undefined;
  try {
    const binary = atob(code.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (code.length % 4)) % 4));
    const query = decoder.decode(Uint8Array.from(binary, (c) => c.charCodeAt(0)));
    const params = new URLSearchParams(query);
    return params.get('sig') && params.get('client_id') ? query : undefined;
  } catch {
    return undefined;
  }
}

/** Signing bookkeeping the library adds to the authorize query; dropped when the query is replayed. */
const SIGNING_PARAMS = ['sig', 'exp', 'ba_iat', 'ba_pl', 'ba_param'];

/** The original authorize parameters of a signed query (what the sign-in page replays after signing in). */
export function authorizeParamsOf(signedQuery: string): URLSearchParams {
  const params = new URLSearchParams(signedQuery);
  for (const name of SIGNING_PARAMS) params.delete(name);
  return params;
}
