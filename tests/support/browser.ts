import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type LaunchOptions, type Page } from 'playwright-core';

/**
 * Headless Debian Chromium for the browser tests, driven by playwright-core: one executable (CHROMIUM_PATH or
 * /usr/bin/chromium), one set of flags (no sandbox, GPU, background networking, component updates or sync),
 * screenshots under .test-artifacts/ (git-ignored).
 */

export const ARTIFACTS = '.test-artifacts';

const launchOptions = (): LaunchOptions => ({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  headless: true,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
  ],
});

/** A browser whose contexts (browser.newContext()) are fresh and in-memory. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch(launchOptions());
}

/**
 * One persistent context on a fresh profile directory (playwright wants it as the userDataDir); `close` shuts
 * the browser and deletes the profile.
 */
export async function launchChromiumProfile(): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), 'chromium-profile-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, launchOptions());
  } catch (err) {
    rmSync(profile, { recursive: true, force: true });
    throw err;
  }
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a screenshot of the page as .test-artifacts/<name>. */
export async function screenshot(page: Page, name: string, options: { fullPage?: boolean } = {}): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ ...options, path: `${ARTIFACTS}/${name}` });
}

/**
 * Makes every host other than `origin` unreachable for the context (data: and blob: URLs still load); the
 * returned list collects the URLs that were refused.
 */
export async function blockOtherHosts(context: BrowserContext, origin: string): Promise<string[]> {
  const blocked: string[] = [];
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(origin) || url.startsWith('data:') || url.startsWith('blob:')) return route.continue();
    blocked.push(url);
    return route.abort('internetdisconnected');
  });
  return blocked;
}
