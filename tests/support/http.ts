import { request as httpRequest } from 'node:http';
/**
 * A small HTTP client for tests: JSON in, envelope out, cookies and bearer tokens per call.
 * It goes over a real socket to the app under test (no in-process shortcuts).
 */
export interface CallOptions {
  /** Cookie header value, e.g. from `session.cookie`. */
  cookie?: string;
  bearer?: string;
  headers?: Record<string, string>;
  /** A JSON body (sets Content-Type: application/json), or a raw string/Uint8Array body sent as is. */
  json?: unknown;
  body?: string | Uint8Array;
  redirect?: RequestRedirect;
}

export interface CallResult<T = any> {
  status: number;
  headers: Headers;
  /** Parsed JSON body (undefined when the body is empty or not JSON). */
  body: T;
  text: string;
}

export class HttpClient {
  readonly baseUrl: string;
  constructor(baseUrl: string) {
    this.baseUrl = baseUrl;
  }

  async call<T = any>(method: string, path: string, options: CallOptions = {}): Promise<CallResult<T>> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.cookie) headers.cookie = options.cookie;
    if (options.bearer) headers.authorization = `Bearer ${options.bearer}`;
    let body: BodyInit | undefined;
    if (options.json !== undefined) {
      headers['content-type'] ??= 'application/json';
      body = JSON.stringify(options.json);
    } else if (options.body !== undefined) {
      body = options.body as BodyInit;
    }
    const res = await fetch(new URL(path, this.baseUrl), { method, headers, body, redirect: options.redirect ?? 'manual' });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  }

  get<T = any>(path: string, options?: CallOptions) {
    return this.call<T>('GET', path, options);
  }
  post<T = any>(path: string, options?: CallOptions) {
    return this.call<T>('POST', path, options);
  }
  put<T = any>(path: string, options?: CallOptions) {
    return this.call<T>('PUT', path, options);
  }
  patch<T = any>(path: string, options?: CallOptions) {
    return this.call<T>('PATCH', path, options);
  }
  delete<T = any>(path: string, options?: CallOptions) {
    return this.call<T>('DELETE', path, options);
  }
}

/**
 * A request with exactly the headers given, as a browser sends them: Node's fetch adds its own `Sec-Fetch-Mode: cors`,
 * which hides the image, frame or navigation a test means to send. Raw node:http, so fetch metadata arrive as set.
 */
export function browserRequest(
  baseUrl: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; location?: string; setCookies: string[]; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(path, baseUrl), { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, location: res.headers.location, setCookies: res.headers['set-cookie'] ?? [], text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A GET with exactly the headers given (browserRequest). */
export const browserGet = (baseUrl: string, path: string, headers: Record<string, string>) => browserRequest(baseUrl, 'GET', path, headers);
