import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL (postgres tier) that a test controls, for real network faults rather than thrown
 * stand-ins: `cut()` resets the open connections (a network failure: the app's side gets an RST, the backend just
 * sees EOF), `down()` also refuses new ones until `up()` (a database restart or a failover, seconds long).
 */
export interface TcpProxy {
  port: number;
  /** Resets every open connection; answers how many there were. */
  cut(): number;
  /** Resets every open connection and refuses new ones until up(). */
  down(): void;
  /** Accepts connections again (on the same port). */
  up(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const cut = () => {
    const n = pairs.size;
    for (const [client, upstream] of [...pairs]) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    pairs.clear();
    return n;
  };
  return {
    port,
    cut,
    down() {
      // Not listening: a new connection is refused (ECONNREFUSED), as by a server that is restarting.
      server.close();
      cut();
    },
    up: async () => {
      if (!server.listening) await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    },
    close: () => new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve())),
  };
}

/** `url` (a test database's) with its host and port replaced by the proxy's. */
export function throughProxy(url: string, proxy: TcpProxy): string {
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(proxy.port);
  return proxied.toString();
}
