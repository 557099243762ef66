import type { Config } from '../platform/config.ts';

/**
 * The health record (interface-spec 2.3). Kept free of heavy imports: the Node entry answers /health with it
 * while the rest of the application is still loading (see starting.ts).
 */
export interface HealthRecord {
  status: 'ok';
  gitSha: string;
  releaseVersion: string;
  uptimeSec: number;
  timestamp: string;
}

export function healthRecord(config: Pick<Config, 'gitSha' | 'releaseVersion'>, startedAt: Date, now: Date): HealthRecord {
  return {
    status: 'ok',
    gitSha: config.gitSha,
    releaseVersion: config.releaseVersion,
    // Uptime is real elapsed process time, not the injectable clock (which tests move around).
    uptimeSec: Math.max(0, Math.floor((Date.now() - startedAt.getTime()) / 1000)),
    timestamp: now.toISOString(),
  };
}
