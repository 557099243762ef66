import type { Context } from 'hono';
import type { AppEnv } from '../platform/app-types.ts';

/**
 * The service's few server-rendered HTML pages (the admin page, and the built-in pages a front end replaces:
 * http/built-in-pages.ts) share one skeleton and one set of security headers: a strict CSP (nothing from elsewhere, inline styles, scripts only
 * with the page's nonce), no framing, no referrer, no caching.
 */

export interface HtmlPageOptions {
  /** The h1, and the tab title followed by `titleSuffix`; escaped here. */
  title: string;
  titleSuffix: string;
  /** Extra lines for <head> before the <style> element (already HTML, each line indented and ending in \n). */
  head?: string;
  /** The stylesheet's lines, inserted as they are. */
  style: string;
  /** Already-escaped HTML after the h1. */
  body: string;
  /** Allows the page's inline script(s) carrying this nonce; without one no script runs. */
  nonce?: string | undefined;
  /** CSP directives beyond the shared ones, placed after connect-src (e.g. img-src, form-action). */
  directives: string[];
}

export function htmlPage(c: Context<AppEnv>, status: 200 | 400 | 401 | 403, options: HtmlPageOptions): Response {
  const { title, titleSuffix, head = '', style, body, nonce, directives } = options;
  const html = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${escapeHtml(title)}${titleSuffix}</title>
${head}  <style>
${style}
  </style>
</head>
<body>
  <h1>${escapeHtml(title)}</h1>
  ${body}
</body>
</html>`;
  const csp = [
    "default-src 'none'",
    "style-src 'unsafe-inline'",
    nonce ? `script-src 'nonce-${nonce}'` : "script-src 'none'",
    "connect-src 'self'",
    ...directives,
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join('; ');
  return c.html(html, status, {
    'content-security-policy': csp,
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-store',
  });
}

/** A fresh CSP nonce: 16 random bytes, base64. */
export function randomNonce(): string {
  return btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
}

/** Text made safe for HTML element content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]!);
}
