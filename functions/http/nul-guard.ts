import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { basicCredentials } from './basic-credentials.ts';
import { ApiError } from './errors.ts';
import { hasBody } from './body-limit.ts';

/**
 * PostgreSQL text cannot hold a NUL character: a value carrying one makes the statement fail, which would
 * surface as a 500. Such input is refused here, once for every route (ours and the auth library's), as a
 * 400 before any handler runs: `%00` anywhere in the URL, a `\u0000` escape in a JSON body, `%00` in a
 * form body, or a NUL in the client credentials of an `Authorization: Basic` header (the OAuth endpoints look the
 * client up by the id decoded from it).
 */
const jsonNul = /(^|[^\\])(\\\\)*\\u0000/;
const encodedNul = /%00/;

export function rejectNulCharacters(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    if (encodedNul.test(c.req.url)) throw nulError('url');
    if (basicCredentialsHoldNul(c.req.header('authorization'))) throw nulError('authorization');
    const type = c.req.header('content-type') ?? '';
    const isJson = /^application\/([\w.+-]+\+)?json\b/i.test(type);
    const isForm = /^application\/x-www-form-urlencoded\b/i.test(type);
    if ((isJson || isForm) && hasBody(c)) {
      // Read through Hono's body cache, so the validator's c.req.json() parses this same text and the body is read
      // once. The auth library reads the raw request itself, so under /api/auth a copy is read instead.
      const text = c.req.path.startsWith('/api/auth/') ? await c.req.raw.clone().text() : await c.req.text();
      if ((isJson && jsonNul.test(text)) || (isForm && encodedNul.test(text))) throw nulError('body');
    }
    await next();
  };
}

/** Decoded as the auth library decodes them (a value it cannot decode it refuses itself, as invalid_client). */
function basicCredentialsHoldNul(authorization: string | undefined): boolean {
  const credentials = authorization ? basicCredentials(authorization) : undefined;
  return credentials !== undefined && (credentials.clientId.includes('\0') || credentials.clientSecret.includes('\0'));
}

function nulError(where: 'url' | 'body' | 'authorization') {
  return new ApiError('VALIDATION_ERROR', 'Text must not contain NUL characters', {
    issues: [{ path: where, message: 'must not contain NUL (\\u0000) characters' }],
  });
}
