/**
 * A request retried across the instances of a service until one
 * acknowledges it: what the fault tests' load generators share. Outages and
 * overload (5xx, 429, timeouts, refused connections, no instance up) are
 * counted by reason and retried with a capped exponential backoff; a
 * refusal of the request itself (`Refused`) would repeat forever, so it
 * stops the request and reaches the test.
 */

/** The system refused a well-formed request: retrying cannot help. */
export class Refused extends Error {}

/** An attempt that did not land: why, for the failure counts. */
export interface Retry {
  retry: string
}

export class RetryingSender {
  retries = 0
  readonly failures: Record<string, number> = {}
  private next = 0
  private giveUpAt = Number.POSITIVE_INFINITY

  constructor(private readonly targets: () => string[]) {}

  /** From now on, a request still failing after `timeoutMs` is given up. */
  giveUpAfter(timeoutMs: number): void {
    this.giveUpAt = Date.now() + timeoutMs
  }

  /** Runs `attempt` on the instances in turn until it returns a result; undefined when given up. */
  async send<T>(attempt: (target: string) => Promise<T | Retry>): Promise<T | undefined> {
    for (let n = 0; ; n++) {
      const targets = this.targets()
      const target = targets.length > 0 ? targets[this.next++ % targets.length] : undefined
      const outcome = target === undefined ? { retry: 'no instance' } : await this.tryOnce(attempt, target)
      if (!isRetry(outcome)) return outcome
      this.failures[outcome.retry] = (this.failures[outcome.retry] ?? 0) + 1
      if (Date.now() > this.giveUpAt) return undefined
      this.retries++
      await new Promise((r) => setTimeout(r, Math.min(1000, 100 * 2 ** Math.min(n, 4))))
    }
  }

  private async tryOnce<T>(attempt: (target: string) => Promise<T | Retry>, target: string): Promise<T | Retry> {
    try {
      return await attempt(target)
    } catch (err) {
      if (err instanceof Refused) throw err
      return { retry: (err as Error).name === 'TimeoutError' ? 'timeout' : 'connection' }
    }
  }
}

/** The answer of an attempt whose status is not a success: a Retry for outages and overload, else a refusal. */
export function retryOrRefuse(status: number, refusal: string): Retry {
  if (status >= 500 || status === 429) return { retry: String(status) }
  throw new Refused(refusal)
}

function isRetry(value: unknown): value is Retry {
  return typeof value === 'object' && value !== null && typeof (value as Partial<Retry>).retry === 'string' && Object.keys(value).length === 1
}
