/**
 * The two consumers of bench/distributed, each in its own worker thread so
 * that neither the publisher's pacing loop nor the other consumer delays
 * the moment an event is seen:
 *
 *  - `webhook`: the app's webhook endpoint, a node:http server on loopback
 *    that answers CRC checks and verifies the signature of every POST
 *    (HMAC-SHA256 of the body with the consumer secret, as a customer's
 *    receiver must; a bad one is counted and answered 401);
 *  - `stream`: one client of GET /2/activity/stream (one JSON envelope per
 *    `\r\n`), which reconnects with `backfill_minutes` when the server ends
 *    the connection, as the platform tells clients to.
 *
 * Every event carries the wall-clock time it was handed to the ingest route
 * (`payload.bench_sent_at`, epoch ms with a fraction; worker threads share
 * the clock through performance.timeOrigin). Events are grouped by phase
 * (digits 2-3 of their event_uuid: one phase per rate and run), and for each
 * the first arrival's time and latency are kept, repeats counted as
 * duplicates. The parent asks for counts (progress) and for a phase's
 * figures against its window and deadline (report).
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { parentPort, workerData } from 'node:worker_threads'
import { percentile } from '../support/stats'

export type ObserverKind = 'webhook' | 'stream'

export interface ObserverData {
  kind: ObserverKind
  /** webhook: the consumer secret the signatures are made with. */
  secret?: string
  /** stream: base URL and app-only bearer. */
  url?: string
  bearer?: string
}

/** Asked by the parent. */
export type ObserverRequest =
  | { id: number; type: 'count'; phase: number }
  | { id: number; type: 'report'; phase: number; windowStart: number; windowEnd: number; deadline: number }
  | { id: number; type: 'samples'; phase: number }

export interface PhaseCount {
  unique: number
  /** Distinct events seen over every phase (the system's progress on any backlog). */
  total: number
  duplicates: number
  badSignatures: number
  lastArrival: number
}

export interface PhaseReport extends PhaseCount {
  /** Distinct events seen by the deadline. */
  onTime: number
  /** Distinct events first seen inside [windowStart, windowEnd] (the publishing window). */
  inWindow: number
  p50: number
  p99: number
  max: number
  /** Stream: connections opened and the reasons of their ends so far. */
  connections: number
  ends: string[]
}

/** Every first arrival of a phase: when its event was sent and when it arrived (epoch ms), in arrival order. */
export interface PhaseSamples {
  sentAt: Float64Array
  arrivedAt: Float64Array
}

export type ObserverReply =
  | { id: number; type: 'count'; count: PhaseCount }
  | { id: number; type: 'report'; report: PhaseReport }
  | { id: number; type: 'samples'; samples: PhaseSamples }
  | { type: 'ready'; url?: string }
  | { type: 'failed'; message: string }

const now = (): number => performance.timeOrigin + performance.now()

/** Digits 2-3 of the bench's event_uuids: `7PPRRRRRRSSSSSSSSSS`. */
export function phaseOf(uuid: string): number {
  return Number(uuid.slice(1, 3))
}

class Phase {
  readonly first = new Map<string, number>()
  readonly arrivals: number[] = []
  readonly latencies: number[] = []
  duplicates = 0
  badSignatures = 0
  lastArrival = 0

  seen(uuid: string, sentAt: number, at: number): void {
    if (this.first.has(uuid)) {
      this.duplicates++
      return
    }
    this.first.set(uuid, at)
    this.arrivals.push(at)
    this.latencies.push(at - sentAt)
    if (at > this.lastArrival) this.lastArrival = at
  }
}

const phases = new Map<number, Phase>()
let badSignaturesUnknownPhase = 0
let connections = 0
const ends: string[] = []

function phase(n: number): Phase {
  let p = phases.get(n)
  if (!p) {
    p = new Phase()
    phases.set(n, p)
  }
  return p
}


/** Reads an envelope (`{"data":{"event_uuid":..,"payload":{"bench_sent_at":..}}}`); undefined for anything else. */
function envelope(text: string): { uuid: string; sentAt: number } | undefined {
  let json: { data?: { event_uuid?: unknown; payload?: { bench_sent_at?: unknown } } }
  try {
    json = JSON.parse(text) as typeof json
  } catch {
    return undefined
  }
  const uuid = json.data?.event_uuid
  const sentAt = json.data?.payload?.bench_sent_at
  if (typeof uuid !== 'string' || typeof sentAt !== 'number') return undefined
  return { uuid, sentAt }
}

// ---------------------------------------------------------------- webhook receiver

function signature(secret: string, message: Buffer | string): string {
  return `sha256=${createHmac('sha256', secret).update(message).digest('base64')}`
}

function sameString(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

async function startReceiver(secret: string): Promise<string> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const at = now()
      if (req.method === 'GET') {
        const token = new URL(req.url ?? '/', 'http://receiver').searchParams.get('crc_token')
        if (token === null) return void res.writeHead(400).end()
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ response_token: signature(secret, token) }))
        return
      }
      const body = Buffer.concat(chunks)
      const header = req.headers['x-twitter-webhooks-signature']
      const e = envelope(body.toString('utf8'))
      if (typeof header !== 'string' || !sameString(header, signature(secret, body))) {
        if (e) phase(phaseOf(e.uuid)).badSignatures++
        else badSignaturesUnknownPhase++
        res.writeHead(401).end()
        return
      }
      if (e) phase(phaseOf(e.uuid)).seen(e.uuid, e.sentAt, at)
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhook`
}

// ---------------------------------------------------------------- stream client

function startStream(base: string, bearer: string): Promise<void> {
  let opened: (() => void) | undefined
  const first = new Promise<void>((resolve) => (opened = resolve))
  const connect = (backfill: boolean): void => {
    const url = new URL('/2/activity/stream', base)
    if (backfill) url.searchParams.set('backfill_minutes', '2')
    let done = false
    const again = (why: string): void => {
      if (done) return
      done = true
      ends.push(why)
      setTimeout(() => connect(true), 200)
    }
    const req = http.get(url, { headers: { authorization: `Bearer ${bearer}` } }, (res) => {
      if (res.statusCode !== 200) {
        res.resume()
        return again(`status ${res.statusCode}`)
      }
      connections++
      opened?.()
      opened = undefined
      let buffer = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        const at = now()
        buffer += chunk
        let from = 0
        let cut: number
        while ((cut = buffer.indexOf('\r\n', from)) >= 0) {
          const line = buffer.slice(from, cut)
          from = cut + 2
          if (line === '') continue
          const e = envelope(line)
          if (e) phase(phaseOf(e.uuid)).seen(e.uuid, e.sentAt, at)
          else if (line.includes('"errors"')) ends.push(line.slice(0, 200))
        }
        buffer = buffer.slice(from)
      })
      res.on('end', () => again('end'))
      res.on('close', () => again('close'))
      res.on('error', () => again('response error'))
    })
    req.on('error', (err) => again(`connection error: ${err.message}`))
  }
  connect(false)
  return first
}

// ---------------------------------------------------------------- requests from the parent

function count(n: number): PhaseCount {
  const p = phase(n)
  let total = 0
  for (const x of phases.values()) total += x.first.size
  return { unique: p.first.size, total, duplicates: p.duplicates, badSignatures: p.badSignatures + badSignaturesUnknownPhase, lastArrival: p.lastArrival }
}

function report(r: Extract<ObserverRequest, { type: 'report' }>): PhaseReport {
  const p = phase(r.phase)
  const onTime: number[] = []
  let inWindow = 0
  for (let i = 0; i < p.arrivals.length; i++) {
    const at = p.arrivals[i] as number
    if (at <= r.deadline) onTime.push(p.latencies[i] as number)
    if (at >= r.windowStart && at <= r.windowEnd) inWindow++
  }
  onTime.sort((a, b) => a - b)
  return { ...count(r.phase), onTime: onTime.length, inWindow, p50: percentile(onTime, 50), p99: percentile(onTime, 99), max: onTime[onTime.length - 1] ?? Number.NaN, connections, ends: [...ends] }
}

function samples(n: number): PhaseSamples {
  const p = phase(n)
  const arrivedAt = Float64Array.from(p.arrivals)
  const sentAt = arrivedAt.map((at, i) => at - (p.latencies[i] as number))
  return { sentAt, arrivedAt }
}

function answer(m: ObserverRequest): ObserverReply {
  if (m.type === 'count') return { id: m.id, type: 'count', count: count(m.phase) }
  if (m.type === 'samples') return { id: m.id, type: 'samples', samples: samples(m.phase) }
  return { id: m.id, type: 'report', report: report(m) }
}

async function main(): Promise<void> {
  const data = workerData as ObserverData
  const port = parentPort
  if (!port) throw new Error('observer.ts runs as a worker thread')
  port.on('message', (m: ObserverRequest) => port.postMessage(answer(m)))
  try {
    if (data.kind === 'webhook') {
      const url = await startReceiver(data.secret ?? '')
      port.postMessage({ type: 'ready', url } satisfies ObserverReply)
    } else {
      await startStream(data.url ?? '', data.bearer ?? '')
      port.postMessage({ type: 'ready' } satisfies ObserverReply)
    }
  } catch (err) {
    port.postMessage({ type: 'failed', message: (err as Error).message } satisfies ObserverReply)
  }
}

if (parentPort) void main()
