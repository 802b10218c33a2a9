import fs from 'node:fs'
import path from 'node:path'
import { AxeBuilder } from '@axe-core/playwright'
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

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

/** Width and height of a PNG file (its IHDR), or undefined when the file is not a PNG. */
export function pngSize(file: string): { width: number; height: number } | undefined {
  const bytes = fs.readFileSync(file)
  if (bytes.length < 24 || !bytes.subarray(0, 8).equals(PNG_SIGNATURE) || bytes.toString('latin1', 12, 16) !== 'IHDR') return undefined
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) }
}

/**
 * A full-page screenshot under SCREENSHOT_DIR/<file>/<name>.png (the old one
 * removed first), asserted written: a non-empty PNG of the page's width.
 */
export async function screenshot(t: Test, page: Page, file: string, name: string): Promise<string> {
  const out = path.join(SCREENSHOT_DIR, file, `${name}.png`)
  fs.mkdirSync(path.dirname(out), { recursive: true })
  fs.rmSync(out, { force: true })
  await page.screenshot({ path: out, fullPage: true })
  const size = fs.existsSync(out) ? pngSize(out) : undefined
  const width = page.viewportSize()?.width ?? 0
  t.ok(size !== undefined && size.height > 0 && size.width >= width, `screenshot ${file}/${name}.png written: a PNG ${size ? `${size.width}x${size.height}` : '(missing or not a PNG)'}`)
  return out
}

/**
 * How far the page reaches past the viewport's width (CSS pixels; 0: nothing
 * to scroll sideways), measured against the viewport set for the context: a
 * phone browser widens its layout viewport to fit a too-wide page, so
 * window.innerWidth alone would hide the overflow. `culprits`: the innermost
 * elements sticking out, to say what to fix.
 */
export async function sidewaysOverflow(page: Page): Promise<{ overflow: number; culprits: string[] }> {
  const width = page.viewportSize()?.width ?? 0
  return (await page.evaluate(`(() => {
    const width = ${width}
    const out = (e) => e.getBoundingClientRect().right > width + 1
    const culprits = [...document.querySelectorAll('body *')].filter((e) => out(e) && ![...e.children].some(out)).slice(0, 5)
      .map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (typeof e.className === 'string' && e.className ? '.' + e.className.split(' ').join('.') : ''))
    const overflow = Math.max(document.documentElement.scrollWidth, window.innerWidth) - width
    return { overflow, culprits: overflow > 1 ? culprits : [] }
  })()`)) as { overflow: number; culprits: string[] }
}

/** `data-*` attribute `attr` of every element matching `selector`, in page order (read in the page: no DOM types here). */
export async function attributes(page: Page, selector: string, attr: string): Promise<string[]> {
  return (await page.evaluate(`[...document.querySelectorAll(${JSON.stringify(selector)})].map((e) => e.getAttribute(${JSON.stringify(attr)}))`)) as string[]
}

/** The data of the Chart.js chart drawn on `canvas` (Chart.getChart), as the page holds it. */
export interface ChartData {
  labels: string[]
  datasets: Array<{ label: string; data: Array<number | null> }>
}

export async function chartData(page: Page, canvas: string): Promise<ChartData> {
  return (await page.evaluate(`(() => {
    const chart = Chart.getChart(document.querySelector(${JSON.stringify(canvas)}))
    return chart ? { labels: chart.data.labels, datasets: chart.data.datasets.map((d) => ({ label: d.label, data: d.data })) } : undefined
  })()`)) as ChartData
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

/** axe-core's serious and critical violations of the page (WCAG 2.0/2.1 A and AA rules), as `rule: target` lines. */
export async function axeProblems(page: Page): Promise<string[]> {
  // Console pages have no frames: the one-pass run (legacy mode) spares the blank page the cross-frame
  // run opens per analysis; resultTypes: only violations are described. Together about twice as fast.
  const results = await new AxeBuilder({ page }).withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']).options({ resultTypes: ['violations'] }).setLegacyMode().analyze()
  return results.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .flatMap((v) => v.nodes.slice(0, 3).map((n) => `${v.id} (${v.impact}): ${n.target.join(' ')}`))
}

/**
 * Clicks per task, as a person would make them (a selected option or a
 * confirmed dialog counts as one): `task` starts a count, `click` clicks
 * and counts, `done` records it. The counts are printed at the end of the
 * file's run (t.comment) for the docs and the report.
 */
export class ClickCounter {
  private current = 0
  readonly counts: Array<[string, number]> = []

  start(): void {
    this.current = 0
  }

  async click(target: { click: () => Promise<void> }): Promise<void> {
    this.current++
    await target.click()
  }

  /** A click made another way (choosing an option, accepting a dialog). */
  count(n = 1): void {
    this.current += n
  }

  done(t: Test, task: string): number {
    this.counts.push([task, this.current])
    t.comment(`clicks: ${task}: ${this.current}`)
    return this.current
  }
}
