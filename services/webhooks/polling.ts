import type { Logger } from 'pino'
import type { Worker } from '../common/service'

/** A timer loop that never overlaps itself and stops cleanly (waiting for the pass in progress). */
export class PollingWorker implements Worker {
  private timer: NodeJS.Timeout | undefined
  private running: Promise<unknown> | undefined
  /** Poked while a pass ran: what it asked for may have come after that pass looked, so another runs at once. */
  private pokedWhileRunning = false
  private stopped = false

  constructor(
    readonly name: string,
    private readonly periodMs: number,
    private readonly pass: () => Promise<unknown>,
    private readonly log: Logger
  ) {
    this.schedule(0)
  }

  private schedule(delay: number): void {
    if (this.stopped) return
    this.timer = setTimeout(() => {
      this.running = this.pass()
        .catch((err: unknown) => this.log.warn({ err, worker: this.name }, 'periodic pass failed'))
        .finally(() => {
          this.running = undefined
          const again = this.pokedWhileRunning
          this.pokedWhileRunning = false
          this.schedule(again ? 0 : this.periodMs)
        })
    }, delay)
  }

  /** Runs a pass soon instead of waiting for the period (e.g. a slot freed up). */
  poke(): void {
    if (this.stopped) return
    if (this.running) {
      this.pokedWhileRunning = true
      return
    }
    if (this.timer) clearTimeout(this.timer)
    this.schedule(0)
  }

  async close(): Promise<void> {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    await this.running
  }
}
