import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { chromium, type Browser, type Page } from 'playwright-core'
import t, { type Test } from 'tap'
import NodeWebSocket from 'ws'
import { activityService } from '../../services/activity/service'
import type { Runtime } from '../../services/common/runtime'
import { gatewayService } from '../../services/gateway/service'
import { streamService } from '../../services/stream/service'
import { TicketKeys, TICKET_TTL_MS } from '../../services/stream/tickets'
import { bearerRequest } from '../support/http'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { ingest, nextUserId, OPERATOR_TOKEN, sampleEvent, subscribe } from '../support/fixtures/activity'

/**
 * The stream from a web page: Debian's chromium (playwright-core) opens the
 * WebSocket with its native `WebSocket`, which cannot send an Authorization
 * header, using a single-use ticket the app's server asked for with its
 * bearer token. The page is served by a loopback server of its own (another
 * origin than the gateway's), as a customer's page would be.
 */

const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']
const WAIT = 15_000

let launched: Promise<Browser> | undefined
t.teardown(async () => {
  if (launched) await (await launched).close()
})

/** What the page saw on one WebSocket. */
interface PageSocket {
  opened: boolean
  protocol: string
  messages: string[]
  closeCode: number | null
}

async function start(t: Test): Promise<{ rt: Runtime; id: TestIdentity; page: Page; wsBase: string }> {
  const rt = await startTestRuntime(t, { services: [gatewayService, activityService, streamService], env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const site = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><html lang="en"><title>Live activity</title><p>live</p></html>'))
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve))
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        site.close(() => resolve())
        site.closeAllConnections()
      })
  )
  launched ??= chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: CHROMIUM_ARGS, headless: true, timeout: 30_000 })
  const context = await (await launched).newContext()
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(WAIT)
  await page.goto(`http://127.0.0.1:${(site.address() as AddressInfo).port}/`)
  return { rt, id, page, wsBase: rt.baseUrl.replace(/^http/, 'ws') }
}

async function newTicket(t: Test, rt: Runtime, bearer: string): Promise<string> {
  const res = await bearerRequest('POST', `${rt.baseUrl}/2/activity/stream/ticket`, bearer)
  t.equal(res.status, 200, 'a ticket is issued')
  const { data } = res.json<{ data: { ticket: string; expires_in: number } }>()
  t.equal(data.expires_in, TICKET_TTL_MS / 1000)
  return data.ticket
}

/** Opens a native WebSocket in the page under `name`; its events are recorded in the page's sockets[name]. */
async function openInPage(page: Page, name: string, url: string, protocols: string[] = []): Promise<void> {
  await page.evaluate(
    ({ name, url, protocols }) => {
      const w = globalThis as unknown as { sockets?: Record<string, PageSocket> }
      const seen: PageSocket = { opened: false, protocol: '', messages: [], closeCode: null }
      ;(w.sockets ??= {})[name] = seen
      const Native = (globalThis as unknown as { WebSocket: typeof NodeWebSocket }).WebSocket
      const ws = protocols.length > 0 ? new Native(url, protocols) : new Native(url)
      ws.onopen = () => {
        seen.opened = true
        seen.protocol = ws.protocol
      }
      ws.onmessage = (e) => void seen.messages.push(String(e.data))
      ws.onclose = (e) => (seen.closeCode = e.code)
      ;((w as unknown as { live?: unknown[] }).live ??= []).push(ws)
    },
    { name, url, protocols }
  )
}

async function socketState(page: Page, name: string): Promise<PageSocket> {
  return page.evaluate((name) => (globalThis as unknown as { sockets: Record<string, PageSocket> }).sockets[name] as PageSocket, name)
}

async function waitSocket(page: Page, name: string, until: (s: PageSocket) => boolean): Promise<PageSocket> {
  const deadline = Date.now() + WAIT
  for (;;) {
    const s = await socketState(page, name)
    if (until(s)) return s
    if (Date.now() > deadline) throw new Error(`${name}: not there within ${WAIT} ms: ${JSON.stringify(s)}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

function uuidsOf(s: PageSocket): string[] {
  return s.messages.map((m) => (JSON.parse(m) as { data?: { event_uuid?: string } }).data?.event_uuid ?? '?')
}

const INVALID_TOKEN = JSON.stringify({ errors: [{ code: 89, message: 'Invalid or expired token.' }] })

t.test('a page streams with a ticket (query or subprotocol); a reused ticket is refused with the interface error', async (t) => {
  const { rt, id, page, wsBase } = await start(t)
  const userId = nextUserId()
  const stranger = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, tag: 'page' })

  const ticket = await newTicket(t, rt, id.bearer)
  await openInPage(page, 'query', `${wsBase}/2/activity/stream?ticket=${ticket}`)
  const viaProtocol = await newTicket(t, rt, id.bearer)
  await openInPage(page, 'protocol', `${wsBase}/2/activity/stream`, [`ticket.${viaProtocol}`])
  t.match(await waitSocket(page, 'query', (s) => s.opened), { opened: true, protocol: '' })
  t.match(await waitSocket(page, 'protocol', (s) => s.opened), { opened: true, protocol: `ticket.${viaProtocol}` }, 'the server echoes the ticket subprotocol')

  const res = await ingest(rt.baseUrl, [sampleEvent('post.create', stranger), sampleEvent('post.create', userId, { text: 'one' }), sampleEvent('post.create', userId, { text: 'two' })])
  t.equal(res.status, 200, res.text)
  const [, first, second] = res.json<{ data: { event_uuids: string[] } }>().data.event_uuids
  for (const name of ['query', 'protocol']) {
    const s = await waitSocket(page, name, (s) => s.messages.length >= 2)
    t.same(uuidsOf(s), [first, second], `${name}: the app's matching events, in order, none of the other user`)
    t.match(JSON.parse(s.messages[0] as string), { data: { event_type: 'post.create', tag: 'page', payload: { text: 'one' } } })
  }

  // Used once: the second opening is refused, in band (a page cannot read a refused handshake's answer).
  await openInPage(page, 'reused', `${wsBase}/2/activity/stream?ticket=${ticket}`)
  const reused = await waitSocket(page, 'reused', (s) => s.closeCode !== null)
  t.same(reused.messages, [INVALID_TOKEN], 'the interface error, as the stream\'s error line')
  t.equal(reused.closeCode, 4401, 'closed with 4000 + the HTTP status')
  await openInPage(page, 'reused-protocol', `${wsBase}/2/activity/stream`, [`ticket.${viaProtocol}`])
  t.match(await waitSocket(page, 'reused-protocol', (s) => s.closeCode !== null), { closeCode: 4401, messages: [INVALID_TOKEN] })
  // The open streams are untouched by the refusals.
  const [third] = (await ingest(rt.baseUrl, [sampleEvent('post.create', userId, { text: 'three' })])).json<{ data: { event_uuids: string[] } }>().data.event_uuids
  t.equal(uuidsOf(await waitSocket(page, 'query', (s) => s.messages.length >= 3))[2], third)
})

t.test('an expired ticket, a ticket whose bearer token was invalidated, and two pages racing for one ticket', async (t) => {
  const { rt, id, page, wsBase } = await start(t)
  const expired = await newTicket(t, rt, id.bearer)
  t.ok((await rt.ctx.store.pttl(TicketKeys.ticket(expired))) > 0, 'the ticket is stored with its expiry')
  // The ticket's own store expiry, brought forward rather than waited for.
  await rt.ctx.store.pexpire(TicketKeys.ticket(expired), 1)
  await new Promise((r) => setTimeout(r, 20))
  await openInPage(page, 'expired', `${wsBase}/2/activity/stream?ticket=${expired}`)
  t.match(await waitSocket(page, 'expired', (s) => s.closeCode !== null), { closeCode: 4401, messages: [INVALID_TOKEN] })

  const raced = await newTicket(t, rt, id.bearer)
  // Both in one turn of the page's event loop: the two handshakes reach the server together.
  await page.evaluate((url) => {
    const w = globalThis as unknown as { raced: Array<{ opened: boolean; closeCode: number | null }>; live: unknown[]; WebSocket: typeof NodeWebSocket }
    w.raced = []
    w.live = []
    for (let i = 0; i < 2; i++) {
      const seen = { opened: false, closeCode: null as number | null }
      const ws = new w.WebSocket(url)
      ws.onopen = () => (seen.opened = true)
      ws.onclose = (e) => (seen.closeCode = e.code)
      w.raced.push(seen)
      w.live.push(ws)
    }
  }, `${wsBase}/2/activity/stream?ticket=${raced}`)
  await page.waitForFunction(() => (globalThis as unknown as { raced: Array<{ closeCode: number | null }> }).raced.some((s) => s.closeCode !== null))
  await new Promise((r) => setTimeout(r, 300))
  const outcome = await page.evaluate(() => (globalThis as unknown as { raced: Array<{ opened: boolean; closeCode: number | null }> }).raced)
  t.same(outcome.map((s) => s.closeCode).sort(), [4401, null], `one of two simultaneous openings wins, the other is refused (${JSON.stringify(outcome)})`)

  // The ticket is bound to the bearer token that asked for it.
  const orphan = await newTicket(t, rt, id.bearer)
  const basic = `Basic ${Buffer.from(`${encodeURIComponent(id.app.consumer_key)}:${encodeURIComponent(id.app.consumer_secret)}`).toString('base64')}`
  const revoked = await fetch(`${rt.baseUrl}/oauth2/invalidate_token`, { method: 'POST', headers: { authorization: basic, 'content-type': 'application/x-www-form-urlencoded' }, body: `access_token=${encodeURIComponent(id.bearer)}` })
  t.equal(revoked.status, 200, await revoked.text())
  await openInPage(page, 'orphan', `${wsBase}/2/activity/stream?ticket=${orphan}`)
  t.match(await waitSocket(page, 'orphan', (s) => s.closeCode !== null), { closeCode: 4401, messages: [INVALID_TOKEN] })
})

t.test('issuing tickets: the app-only bearer only; a ticket never opens the HTTP stream nor rides with a bearer', async (t) => {
  const { rt, id, wsBase } = await start(t)
  const url = `${rt.baseUrl}/2/activity/stream/ticket`
  const none = await fetch(url, { method: 'POST' })
  t.equal(none.status, 401)
  const bad = await bearerRequest('POST', url, 'nope')
  t.same(bad.json(), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })
  const ok = await bearerRequest('POST', url, id.bearer)
  t.equal(ok.headers.get('cache-control'), 'no-store')
  const { ticket } = ok.json<{ data: { ticket: string } }>().data
  t.match(ticket, /^[A-Za-z0-9_-]{32}$/)

  t.equal((await fetch(`${rt.baseUrl}/2/activity/stream?ticket=${ticket}`)).status, 401, 'a ticket is no credential for the HTTP stream')
  const overHttp = await bearerRequest('GET', `${rt.baseUrl}/2/activity/stream`, id.bearer, { query: { ticket } })
  t.equal(overHttp.status, 400)
  const problem = overHttp.json()
  t.match(problem, { type: 'https://api.twitter.com/2/problems/invalid-request', errors: [{ message: /WebSocket stream only/, parameters: { ticket: [''] } }] }, 'the ticket is not echoed')

  // A client that sends a header can read the refused handshake: both credentials at once is a 400 answered in band all the same.
  const both = new NodeWebSocket(`${wsBase}/2/activity/stream?ticket=${ticket}`, { headers: { authorization: `Bearer ${id.bearer}` } })
  const refused = await new Promise<{ code: number; message: string }>((resolve, reject) => {
    let message = ''
    both.on('message', (m) => (message = String(m)))
    both.on('close', (code) => resolve({ code, message }))
    both.on('error', reject)
  })
  t.equal(refused.code, 4400)
  t.match(JSON.parse(refused.message), { errors: [{ type: 'https://api.twitter.com/2/problems/invalid-request', errors: [{ parameters: { ticket: [''] } }] }] })
  // Still unused: the refusal did not spend it.
  const still = new NodeWebSocket(`${wsBase}/2/activity/stream`, [`ticket.${ticket}`])
  await new Promise<void>((resolve, reject) => {
    still.on('open', () => resolve())
    still.on('unexpected-response', () => reject(new Error('refused')))
  })
  t.equal(still.protocol, `ticket.${ticket}`)
  still.terminate()
})
