import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import SwaggerParser from '@apidevtools/swagger-parser'
import t from 'tap'
import { API_REFERENCE_PATH } from '../../services/common/openapi'
import type { Runtime } from '../../services/common/runtime'
import { Browsers } from '../support/fixtures/console'
import { plainRequest } from '../support/http'
import { startTestRuntime } from '../support/runtime'

/**
 * The served OpenAPI documents (the API host's and the sandbox host's) as the
 * ecosystem's tools read them: @apidevtools/swagger-parser validates each
 * against the OpenAPI schema of its version, @redocly/cli lints it with the
 * recommended rules (redocly.yaml says which are off and why), and Swagger
 * UI, served at /docs/, renders the operations in chromium.
 */

const ROOT = path.resolve(__dirname, '..', '..')
const REDOCLY = path.join(ROOT, 'node_modules', '.bin', 'redocly')
const run = promisify(execFile)

type Doc = { openapi: string; paths: Record<string, Record<string, unknown>> }

/** One runtime for the file's tests (each test reads what it needs from it). */
let runtime: Promise<Runtime> | undefined
const started = (): Promise<Runtime> => (runtime ??= startTestRuntime(t))

async function documents(): Promise<Array<[string, Doc]>> {
  const rt = await started()
  const out: Array<[string, Doc]> = [['api', (await plainRequest('GET', `${rt.baseUrl}/openapi.json`)).json<Doc>()]]
  if (rt.sandboxUrl !== undefined) out.push(['sandbox', (await plainRequest('GET', `${rt.sandboxUrl}/openapi.json`)).json<Doc>()])
  return out
}

t.test('swagger-parser validates the served documents', async (t) => {
  for (const [host, doc] of await documents()) {
    t.match(doc.openapi, /^3\.1\.\d+$/, `${host}: OpenAPI 3.1`)
    let error = ''
    try {
      await SwaggerParser.validate(structuredClone(doc) as unknown as Parameters<typeof SwaggerParser.validate>[0])
    } catch (err) {
      error = (err as Error).message.slice(0, 4000)
    }
    t.equal(error, '', `${host}: swagger-parser finds no error in ${Object.keys(doc.paths).length} paths`)
  }
})

t.test('redocly lint passes with the recommended rules', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'openapi-lint-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  for (const [host, doc] of await documents()) {
    const file = path.join(dir, `${host}.json`)
    fs.writeFileSync(file, JSON.stringify(doc))
    // No telemetry, no update check: the test talks to nothing but loopback.
    const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' }
    const result = await run(REDOCLY, ['lint', file, '--config', path.join(ROOT, 'redocly.yaml'), '--format=json', '--max-problems=50'], { env, cwd: ROOT, maxBuffer: 16 << 20 }).then(
      (r) => ({ code: 0, stdout: r.stdout }),
      (err: { code?: number; stdout?: string }) => ({ code: err.code ?? -1, stdout: err.stdout ?? '' })
    )
    const report = JSON.parse(result.stdout.slice(result.stdout.indexOf('{'))) as { problems: Array<{ ruleId: string; severity: string; message: string; location: Array<{ pointer: string }> }> }
    const problems = report.problems.map((p) => `${p.severity} ${p.ruleId} ${p.location[0]?.pointer ?? ''}: ${p.message}`)
    t.same(problems, [], `${host}: no error and no warning`)
    t.equal(result.code, 0, `${host}: redocly lint exits 0`)
  }
})

/** Method and path of each operation Swagger UI has on the page now. */
const SHOWN = `[...document.querySelectorAll('.opblock-summary')].map((e) => (e.querySelector('.opblock-summary-method')?.textContent ?? '') + ' ' + (e.querySelector('.opblock-summary-path')?.textContent ?? '').replace(/\\u200b/g, ''))`

t.test('Swagger UI renders the operations at /docs/', async (t) => {
  const rt = await started()
  const doc = (await plainRequest('GET', `${rt.baseUrl}/openapi.json`)).json<Doc>()
  const expected = Object.entries(doc.paths).flatMap(([p, item]) => Object.keys(item).filter((m) => /^(get|put|post|delete|patch)$/.test(m)).map((m) => `${m.toUpperCase()} ${p}`))
  const { page } = await new Browsers(t).person(t)
  const external: string[] = []
  page.on('request', (r) => {
    if (!r.url().startsWith(rt.baseUrl)) external.push(r.url())
  })
  await page.goto(`${rt.baseUrl}${API_REFERENCE_PATH}/`)
  await page.locator('.opblock').first().waitFor()
  // Swagger UI renders what is near the viewport: scroll to the end, collecting what each screen shows.
  // On a busy machine a screen may still be rendering when read: another pass from the top picks it up.
  const seen = new Set<string>()
  for (let pass = 0; pass < 3 && expected.some((op) => !seen.has(op)); pass++) {
    await page.evaluate('window.scrollTo(0, 0)')
    for (let screen = 0; screen < 200; screen++) {
      await page.waitForTimeout(100)
      for (const op of (await page.evaluate(SHOWN)) as string[]) seen.add(op)
      const atEnd = (await page.evaluate('window.innerHeight + window.scrollY >= document.body.scrollHeight - 2')) as boolean
      if (atEnd && screen > 0) break
      await page.evaluate('window.scrollBy(0, window.innerHeight)')
    }
  }
  t.same(expected.filter((op) => !seen.has(op)), [], `every operation of the document is rendered (${seen.size} of ${expected.length})`)
  t.equal(await page.locator('.errors-wrapper').count(), 0, 'no parser error shown')

  // One operation opened by its deep link: its parameters and its error answer (the interface's shape) are shown.
  await page.goto('about:blank')
  await page.goto(`${rt.baseUrl}${API_REFERENCE_PATH}/#/Webhooks/delete2WebhooksByWebhookId`)
  const op = page.locator('#operations-Webhooks-delete2WebhooksByWebhookId')
  await op.locator('.parameters').waitFor()
  t.ok(await op.locator('.parameter__name', { hasText: 'webhook_id' }).isVisible(), 'the path parameter is listed')
  t.ok(await op.locator('.response-col_status', { hasText: '4XX' }).isVisible(), 'the 4XX answer is listed')
  t.same(external, [], 'the page loads nothing from outside the server')
})
