/**
 * The parent side of bench/distributed/observer.ts: starts a webhook
 * receiver or a stream client in a worker thread and asks it for counts and
 * reports.
 */
import path from 'node:path'
import { Worker } from 'node:worker_threads'
import type { ObserverData, ObserverReply, ObserverRequest, PhaseCount, PhaseReport, PhaseSamples } from './observer'

export type { PhaseCount, PhaseReport, PhaseSamples } from './observer'

type Pending = (reply: ObserverReply) => void
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never

export class Observer {
  private nextId = 1
  private readonly pending = new Map<number, Pending>()

  private constructor(
    private readonly worker: Worker,
    /** The receiver's URL (webhook observers). */
    readonly url: string | undefined
  ) {
    worker.on('message', (m: ObserverReply) => {
      if (!('id' in m)) return
      const resolve = this.pending.get(m.id)
      this.pending.delete(m.id)
      resolve?.(m)
    })
  }

  /** Starts the worker and resolves once its receiver listens or its stream answered 200 (bounded by `timeoutMs`). */
  static async start(data: ObserverData, timeoutMs = 30_000): Promise<Observer> {
    // observer.js from dist; observer.ts when run from source (`node --import=tsx`), loaded through tsx's CommonJS hook.
    const file = path.join(__dirname, `observer${path.extname(__filename)}`)
    const worker = file.endsWith('.ts')
      ? new Worker(`require('tsx/cjs/api').register(); require(${JSON.stringify(file)})`, { eval: true, workerData: data })
      : new Worker(file, { workerData: data })
    try {
      const ready = await new Promise<ObserverReply>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${data.kind} observer not ready within ${timeoutMs} ms`)), timeoutMs)
        worker.once('error', (err) => (clearTimeout(timer), reject(err)))
        worker.on('message', (m: ObserverReply) => {
          if (m.type === 'ready' || m.type === 'failed') {
            clearTimeout(timer)
            resolve(m)
          }
        })
      })
      if (ready.type === 'failed') throw new Error(`${data.kind} observer: ${ready.message}`)
      return new Observer(worker, ready.type === 'ready' ? ready.url : undefined)
    } catch (err) {
      await worker.terminate()
      throw err
    }
  }

  private ask(request: DistributiveOmit<ObserverRequest, 'id'>): Promise<ObserverReply> {
    const id = this.nextId++
    return new Promise((resolve) => {
      this.pending.set(id, resolve)
      this.worker.postMessage({ id, ...request })
    })
  }

  async count(phase: number): Promise<PhaseCount> {
    const reply = await this.ask({ type: 'count', phase })
    if (reply.type !== 'count') throw new Error('unexpected reply')
    return reply.count
  }

  async report(phase: number, windowStart: number, windowEnd: number, deadline: number): Promise<PhaseReport> {
    const reply = await this.ask({ type: 'report', phase, windowStart, windowEnd, deadline })
    if (reply.type !== 'report') throw new Error('unexpected reply')
    return reply.report
  }

  /** When each event of `phase` was sent and first arrived. */
  async samples(phase: number): Promise<PhaseSamples> {
    const reply = await this.ask({ type: 'samples', phase })
    if (reply.type !== 'samples') throw new Error('unexpected reply')
    return reply.samples
  }

  async stop(): Promise<void> {
    await this.worker.terminate()
  }
}
