import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';
import { basicCredentials } from './basic-credentials.ts';
import { ApiError } from './errors.ts';
import { hasBody } from './body-limit.ts';

/**
 * Text that PostgreSQL cannot hold is refused here, once for every route (ours and the auth library's), as a 400
 * before any handler runs, so that no such value reaches a statement and surfaces as a 500:
 *
 * - A NUL character (text cannot hold one): `%00` anywhere in the URL, a NUL byte in a body, a `\u0000` escape in a
 *   JSON body, `%00` in a form body, or a NUL in the client credentials of an `Authorization: Basic` header (the OAuth
 *   endpoints look the client up by the id decoded from it).
 * - A lone UTF-16 surrogate in a JSON body (`"\ud800"`, a high surrogate without its low half or the reverse). It is
 *   valid JSON and passes every string rule, but it is not Unicode: written to a text column the driver turns it
 *   into U+FFFD, written into jsonb (`JSON.stringify(x)::jsonb`, tags, steps, redirect URIs, notes) it is escaped
 *   again and PostgreSQL's jsonb parser refuses it, and the auth library's `encodeURIComponent` of a callback URL
 *   throws on it (a 500 there also told an anonymous caller which emails have accounts). Raw bytes cannot carry
 *   one (invalid UTF-8 decodes to U+FFFD), so only the `\uD800`-`\uDFFF` escapes of a JSON body need a look.
 */
const jsonNul = /(^|[^\\])(\\\\)*\\u0000/;
const jsonSurrogateEscape = /(^|[^\\])(\\\\)*\\u[dD][89a-fA-F]/;
const encodedNul = /%00/;
const JSON_TYPE = /^application\/([a-z0-9.+-]+\+)?json$/i;

const FORM_TYPES = new Set(['application/x-www-form-urlencoded', 'multipart/form-data']);
/** A Content-Type's media type, in lower case, without its parameters. */
export const mediaTypeOf = (contentType: string) => contentType.split(';')[0]!.trim().toLowerCase();
/** A Content-Type of a form (urlencoded or multipart, any case, any parameters), as the auth library reads one. */
export const isFormMediaType = (contentType: string) => FORM_TYPES.has(mediaTypeOf(contentType));

/** A Content-Type of JSON (`application/json` or `application/<x>+json`, any parameters). */
export function isJsonMediaType(contentType: string | undefined): boolean {
  return JSON_TYPE.test(mediaTypeOf(contentType ?? ''));
}

export function rejectUnstorableText(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    if (encodedNul.test(c.req.url)) throw nulError('url');
    if (basicCredentialsHoldNul(c.req.header('authorization'))) throw nulError('authorization');
    const type = c.req.header('content-type') ?? '';
    // Any type naming JSON must be JSON: the auth library parses `application/jsonx` as JSON (better-call tests the
    // prefix) and lets `multipart/form-data+application/json` through its type check, then fails on it (500).
    const isJson = /json/i.test(type);
    const isForm = /x-www-form-urlencoded/i.test(type);
    if ((isJson || isForm || /multipart/i.test(type)) && hasBody(c)) {
      if (isJson && !isJsonMediaType(type)) {
        throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'Send the body as application/json');
      }
      // Likewise a form type must be one: the library takes any type containing a form's name for a form, and the
      // runtime's formData() then throws on it (`application/x-www-form-urlencodedx`: a 500 to anyone; review 101).
      if (!isJson && !isFormMediaType(type)) {
        throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'Send the body as application/json or application/x-www-form-urlencoded');
      }
      // Read through Hono's body cache, so the validator's c.req.json() parses this same text and the body is read
      // once. The auth library reads the raw request itself, so under /api/auth a copy is read instead.
      const text = c.req.path.startsWith('/api/auth/') ? await c.req.raw.clone().text() : await c.req.text();
      if (text.includes('\0') || (isJson && jsonNul.test(text)) || (isForm && encodedNul.test(text))) throw nulError('body');
      if (isJson && jsonSurrogateEscape.test(text) && holdsLoneSurrogate(text)) throw loneSurrogateError();
    }
    await next();
  };
}

/** Decoded as the auth library decodes them (a value it cannot decode it refuses itself, as invalid_client). */
function basicCredentialsHoldNul(authorization: string | undefined): boolean {
  const credentials = authorization ? basicCredentials(authorization) : undefined;
  return credentials !== undefined && (credentials.clientId.includes('\0') || credentials.clientSecret.includes('\0'));
}

/** Whether any string (value or key) of the JSON text is not well-formed UTF-16. Invalid JSON is the parser's 400. */
function holdsLoneSurrogate(text: string): boolean {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return false;
  }
  const pending = [value];
  while (pending.length > 0) {
    const item = pending.pop();
    if (typeof item === 'string') {
      if (!item.isWellFormed()) return true;
    } else if (item !== null && typeof item === 'object') {
      for (const [key, inner] of Object.entries(item)) {
        if (!key.isWellFormed()) return true;
        pending.push(inner);
      }
    }
  }
  return false;
}

function nulError(where: 'url' | 'body' | 'authorization') {
  return new ApiError('VALIDATION_ERROR', 'Text must not contain NUL characters', {
    issues: [{ path: where, message: 'must not contain NUL (\\u0000) characters' }],
  });
}

function loneSurrogateError() {
  return new ApiError('VALIDATION_ERROR', 'Text must be well-formed Unicode', {
    issues: [{ path: 'body', message: 'must not contain a lone UTF-16 surrogate (\\uD800-\\uDFFF without its pair)' }],
  });
}
