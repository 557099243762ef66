import { decodeBasicCredentials } from '@better-auth/core/oauth2';

/**
 * The client credentials of an `Authorization: Basic` header, read exactly as the auth library reads them (its
 * extractClientCredentials: the scheme followed by spaces, then its own decoder, RFC 6749 §2.3.1 form-encoding), or
 * undefined when the header is no Basic credential the library would accept (it then answers invalid_client). One
 * reading for every place that must agree with the library: the NUL guard, and the token endpoint's judgement of
 * which client a request names (a different reading let a caller with no secret have a victim's racing family ended).
 */
export function basicCredentials(authorization: string): { clientId: string; clientSecret: string } | undefined {
  if (!/^Basic +/i.test(authorization)) return undefined;
  try {
    return decodeBasicCredentials(authorization);
  } catch {
    return undefined;
  }
}
