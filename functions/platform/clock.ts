/** The current time, injected so tests can move it (billing periods, addon expiry, token expiry). */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock tests can set and advance. */
export class TestClock implements Clock {
  private current: Date;
  constructor(current = new Date()) {
    this.current = current;
  }
  now(): Date {
    return new Date(this.current.getTime());
  }
  set(date: Date | string): void {
    this.current = new Date(date);
  }
  advance(ms: number): void {
    this.current = new Date(this.current.getTime() + ms);
  }
}

/** A timestamp as the API writes it (ISO 8601 UTC), from a Date or the string a driver returned. */
export const iso = (v: Date | string): string => new Date(v).toISOString();
export const isoOrNull = (v: Date | string | null): string | null => (v === null ? null : iso(v));
