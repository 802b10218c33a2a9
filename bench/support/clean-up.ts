/**
 * What a benchmark started, stopped newest first: on its normal end, when
 * one of its runs ends (`unwindTo` a mark taken before it), and on Ctrl-C
 * or SIGTERM (`onSignals`), so a benchmark never leaves a `make up` or a
 * service process behind.
 */
export class CleanUp {
  private readonly stops: Array<() => Promise<void>> = []
  private all: Promise<void> | undefined

  constructor(private readonly report: (line: string) => void) {}

  /** stopAll() began (a signal, or the end). */
  get stopping(): boolean {
    return this.all !== undefined
  }

  add(stop: () => Promise<void>): void {
    this.stops.push(stop)
  }

  /** A mark for `unwindTo`. */
  mark(): number {
    return this.stops.length
  }

  /** Stops what was added since `mark`, newest first; a failure is reported and the others still stop. */
  async unwindTo(mark: number): Promise<void> {
    for (const stop of this.stops.splice(mark).reverse()) await stop().catch((err: unknown) => this.report(`clean-up: ${(err as Error).message}`))
  }

  stopAll(): Promise<void> {
    this.all ??= this.unwindTo(0)
    return this.all
  }

  /** Ctrl-C, SIGTERM, SIGHUP: everything is stopped, then the process exits. */
  onSignals(): void {
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
      process.on(signal, () => {
        if (this.stopping) return
        this.report(`${signal}: stopping everything the bench started`)
        void this.stopAll().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143))
      })
    }
  }
}
