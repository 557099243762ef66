/**
 * Access tokens here are Bearer tokens (contract.md: `Authorization: Bearer <access token>`), and the API checks no
 * proof of possession. The library, though, bound a token to the key of any `DPoP:` proof sent with the token request
 * (RFC 9449: `token_type: "DPoP"`, `cnf.jkt` in the token) and the discovery documents advertised it: the agent that
 * asked for the binding could not use its token (the API wants Bearer), and anyone holding a copy of it could, as a
 * Bearer token (found by review 38). So the header never reaches the library and the documents do not advertise it:
 * the library then issues a Bearer token, as a server that does not support DPoP does (RFC 9449 §10: the client reads
 * the token type it was given). The authenticator also refuses any token carrying `cnf`.
 */
export function withoutDpop(request: Request): Request {
  if (!request.headers.has('dpop')) return request;
  const headers = new Headers(request.headers);
  headers.delete('dpop');
  return new Request(request, { headers });
}
