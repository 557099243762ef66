import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../support/app.ts';

/**
 * The built-in sign-in and sign-up pages (functions/auth/oauth/pages.ts). Their script posts the
 * credentials with fetch; the form itself is what a browser submits when that script does not run (scripts
 * turned off, an extension blocking inline scripts, a script error). An HTML form without a method is a GET to the
 * page's own address: the password then travels in the URL, into the address bar, the history and every proxy's
 * and CDN's access log (the service's own log keeps query names only).
 */

/** What a browser does with a form when no script intercepts it (HTML: method defaults to GET, action to the page). */
function nativeSubmission(html: string, pageUrl: string, fields: Record<string, string>): { method: string; url: string } {
  const tag = /<form\b[^>]*\bid="credentials"[^>]*>/.exec(html)?.[0];
  if (!tag) throw new Error('no credentials form');
  const method = (/\bmethod="([^"]*)"/i.exec(tag)?.[1] ?? 'get').toLowerCase() === 'post' ? 'POST' : 'GET';
  const action = new URL(/\baction="([^"]*)"/i.exec(tag)?.[1] ?? pageUrl, pageUrl);
  if (method === 'GET') action.search = new URLSearchParams(fields).toString();
  return { method, url: action.href };
}

describe('the credentials pages without their script', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t?.close());

  it('attack: a sign-in or sign-up submitted without script does not put the password into a URL', async () => {
    const password = 'correct horse battery staple';
    for (const path of ['/sign-in', '/sign-up', '/sign-in?next=%2Faccount%2Fbilling']) {
      const page = await t.http.get(path);
      expect(page.status, path).toBe(200);
      const sent = nativeSubmission(page.text, `${t.baseUrl}${path}`, { name: 'A', email: 'someone@example.test', password });
      expect(sent.url, path).not.toContain('password=');
      expect(sent.method, path).toBe('POST');
      // and the service answers that post without an error of its own, repeating nothing of it
      const posted = await t.http.post(new URL(sent.url).pathname + new URL(sent.url).search, {
        headers: { 'content-type': 'application/x-www-form-urlencoded', origin: t.baseUrl },
        body: new URLSearchParams({ email: 'someone@example.test', password }).toString(),
      });
      expect(posted.status, path).toBeLessThan(500);
      expect(posted.text, path).not.toContain(password);
    }
  });
});
