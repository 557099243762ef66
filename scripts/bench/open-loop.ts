import { Agent, request as httpRequest } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * The open-loop load generator, a process of its own: lib.ts `openLoop` starts it with `node`, writes one
 * `OpenLoopPlan` as JSON to its stdin and reads one `OpenLoopResult` as JSON from its stdout. Node builtins only,
 * so Node runs it without a loader.
 *
 * Why a process of its own: its latencies are the figures, so its own pauses must not be in them. Run inside the
 * benchmark's process, whose heap holds every clientReqId sent (for the audit) and every earlier figure, the load
 * generator stopped for a 35 ms major GC in the middle of the 2,000/s run (2026-11-26 02:42, traced with
 * --trace-gc and a GC observer), and the requests due in those 35 ms, sent late and answered late, were the run's
 * p99. Here the heap holds one run's state and nothing else, and the result reports the generator's largest
 * event-loop delay, so a run shows whether the generator kept its schedule.
 */

export interface OpenLoopPlan {
  url: string;
  rate: number;
  seconds: number;
  /** The distinct requests' path and headers (e.g. one per subscription, each with its bearer token). */
  targets: Array<{ path: string; headers: Record<string, string> }>;
  /** The target of the i-th request: `targets[picks[i % picks.length]]`. */
  picks: number[];
  /** The i-th request's body is `{"clientReqId":"<keyPrefix><i>"}`. */
  keyPrefix: string;
}

export interface OpenLoopResult {
  /** Milliseconds from each request's scheduled send time to the end of its answer, in send order. */
  latencies: number[];
  ok: number;
  other: number;
  /** Milliseconds from the first scheduled send to the last answer. */
  elapsed: number;
  /** CPU seconds this process used. */
  cpu: number;
  /** The largest delay of this process's event loop during the run (ms): how late it could have sent or read. */
  eventLoopDelayMax: number;
}

async function run(plan: OpenLoopPlan): Promise<OpenLoopResult> {
  const cpuBefore = process.cpuUsage();
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const agent = new Agent({ keepAlive: true, maxSockets: 4096 });
  const { hostname, port } = new URL(plan.url);
  const total = Math.round(plan.rate * plan.seconds);
  const latencies = new Array<number>(total);
  let ok = 0;
  let other = 0;
  let lastAnswer = 0;
  const send = (i: number, intended: number) =>
    new Promise<void>((resolve) => {
      const target = plan.targets[plan.picks[i % plan.picks.length]!]!;
      const body = `{"clientReqId":"${plan.keyPrefix}${i}"}`;
      const done = (status: number) => {
        lastAnswer = performance.now();
        latencies[i] = lastAnswer - intended;
        if (status >= 200 && status < 300) ok++;
        else other++;
        resolve();
      };
      const req = httpRequest(
        { agent, hostname, port, method: 'POST', path: target.path, headers: { 'content-length': Buffer.byteLength(body), ...target.headers }, timeout: 30_000 },
        (res) => {
          res.resume();
          res.on('end', () => done(res.statusCode ?? 0));
          res.on('error', () => done(0));
        },
      );
      req.on('error', () => done(0));
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.end(body);
    });
  const started = performance.now();
  const answers: Promise<void>[] = [];
  let sent = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const due = Math.min(total, Math.floor(((performance.now() - started) * plan.rate) / 1000) + 1);
      while (sent < due) {
        const i = sent++;
        answers.push(send(i, started + (i * 1000) / plan.rate));
      }
      if (sent >= total) resolve();
      else setTimeout(tick, 1);
    };
    tick();
  });
  await Promise.all(answers);
  agent.destroy();
  delay.disable();
  const cpu = process.cpuUsage(cpuBefore);
  return {
    latencies,
    ok,
    other,
    elapsed: lastAnswer - started,
    cpu: (cpu.user + cpu.system) / 1e6,
    eventLoopDelayMax: delay.max / 1e6,
  };
}

const chunks: Buffer[] = [];
for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
process.stdout.write(JSON.stringify(await run(JSON.parse(Buffer.concat(chunks).toString('utf8')) as OpenLoopPlan)));
