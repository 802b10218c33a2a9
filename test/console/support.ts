import fs from 'node:fs'
import path from 'node:path'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'
import type { Test } from 'tap'
import type { Runtime } from '../../services/common/runtime'
import { FAST_ENV } from '../webhooks/support'

/**
 * The console's browser tests: Debian chromium through playwright-core, one
 * browser per test file, one isolated context (cookie jar) per person.
 * Screenshots go under tap's output directory: .tap/screenshots/console/.
 */

const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']

export const OPERATOR_TOKEN = FAST_ENV.OPERATOR_TOKEN as string

export const CONSOLE_ENV: Record<string, string> = { ...FAST_ENV }

export const SCREENSHOT_DIR = path.resolve(__dirname, '..', '..', '.tap', 'screenshots', 'console')

export class Browsers {
  private launched: Promise<Browser> | undefined

  constructor(t: Test) {
    t.teardown(async () => {
      if (this.launched) await (await this.launched).close()
    })
  }

  /** A fresh browser profile (its own cookies): one person. Phone-sized with `mobile`. */
  async person(t: Test, options: { mobile?: boolean } = {}): Promise<{ context: BrowserContext; page: Page }> {
    this.launched ??= chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: CHROMIUM_ARGS, headless: true, timeout: 30_000 })
    const context = await (await this.launched).newContext(options.mobile ? { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true } : { viewport: { width: 1280, height: 860 } })
    const page = await context.newPage()
    page.setDefaultTimeout(10_000)
    t.teardown(() => context.close())
    return { context, page }
  }
}

export async function screenshot(page: Page, file: string, name: string): Promise<string> {
  const out = path.join(SCREENSHOT_DIR, file, `${name}.png`)
  fs.mkdirSync(path.dirname(out), { recursive: true })
  await page.screenshot({ path: out, fullPage: true })
  return out
}

/** A single-use sign-in link from the operator API (a portal link with appId, an operator's without). */
export async function consoleLink(rt: Runtime, appId?: string): Promise<string> {
  const res = await fetch(`${rt.baseUrl}/admin/console/links`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify(appId === undefined ? {} : { app_id: appId })
  })
  if (res.status !== 201) throw new Error(`console link: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { data: { url: string } }).data.url
}

/** Opens a portal link and presses its button: the person is signed in. */
export async function signInWithLink(page: Page, url: string): Promise<void> {
  await page.goto(url)
  await Promise.all([page.waitForURL(/\/console\/webhooks\//), page.getByRole('button', { name: 'Open the console' }).click()])
}

export async function signInAsOperator(page: Page, rt: Runtime): Promise<void> {
  await page.goto(`${rt.baseUrl}/console/login`)
  await page.getByLabel('Operator token').fill(OPERATOR_TOKEN)
  await Promise.all([page.waitForURL(/\/console\/webhooks\/apps$/), page.getByRole('button', { name: 'Sign in as operator' }).click()])
}

/** The CSRF token of the signed-in page. */
export async function csrfOf(page: Page): Promise<string> {
  return (await page.locator('body').getAttribute('data-csrf')) ?? ''
}
