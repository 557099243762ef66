/**
 * The Node entry's background loops (housekeeping, billing): `round` every `everyMs`, and once at start when asked,
 * one at a time in this process (a round still running when the next is due is not started twice; other instances
 * run their own, which every round allows). A failure goes to `failed` and the next round tries again. Returns stop,
 * which waits (at most 5 s) for a round under way.
 */
export function startRounds(
  round: () => Promise<unknown>,
  options: { everyMs: number; atStart?: boolean; failed: (err: unknown) => void },
): () => Promise<void> {
  let running: Promise<unknown> | undefined;
  const run = () => {
    running ??= round()
      .catch(options.failed)
      .finally(() => (running = undefined));
  };
  if (options.atStart) run();
  const timer = setInterval(run, options.everyMs);
  (timer as { unref?: () => void }).unref?.();
  return async () => {
    clearInterval(timer);
    await Promise.race([running, new Promise((r) => setTimeout(r, 5_000).unref?.())]);
  };
}
