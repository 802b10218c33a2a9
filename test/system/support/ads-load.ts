import type { Test } from 'tap'
import type { AccessToken, App, User } from '../../../services/common/auth/records'
import { authorizationHeader } from '../../../services/common/auth/oauth1'
import type { ServiceContext } from '../../../services/common/context'
import { createAccount } from '../../../services/gateway/ads/accounts'
import type { SystemView } from './system'
import { Refused, retryOrRefuse, RetryingSender } from './retrying'
import type { Tenant } from './tenant'

/**
 * Load through the gateway (a gateway kill must matter on the
 * event path): an advertiser posting organic posts through the ads interface
 * (`POST /12/accounts/:id/tweet`, nullcast=false, signed OAuth 1.0a user
 * context). The gateway stores each post, publishes its entity change on
 * `ads.entity-changes` (account history records it) and its `post.create`
 * on `activity.events` (the matcher delivers it to the author's activity
 * subscription and to stream consumers). A post counts as published only
 * once the gateway answered 200 with its id; a failed request is retried
 * (a post whose answer was lost is made again under a new id and is not
 * counted: only acknowledged ids are held to account).
 */

export interface AdsPostOptions {
  /** Base URL(s) of the ads interface, read at every attempt. */
  targets: () => string[]
  app: App
  user: User
  token: AccessToken
  accountId: string
  /** Posts per second. */
  rate: number
  /** Per-request timeout (default 5 s). */
  requestTimeoutMs?: number
}

export class AdsPostLoad {
  /** Acknowledged post ids. */
  readonly published: string[] = []
  attempts = 0
  /** A refusal of a well-formed post (a 4xx other than 429): the test fails with it. */
  refused: Error | undefined
  private timer: NodeJS.Timeout | undefined
  private readonly pending = new Set<Promise<void>>()
  private seq = 0
  private generated = 0
  private readonly sender: RetryingSender

  constructor(private readonly options: AdsPostOptions) {
    this.sender = new RetryingSender(options.targets)
  }

  get retries(): number {
    return this.sender.retries
  }

  get failures(): Record<string, number> {
    return this.sender.failures
  }

  start(): this {
    this.timer = setInterval(() => this.fire(), Math.max(20, Math.round(1000 / this.options.rate)))
    return this
  }

  /** Posts sent and not yet answered: what a gateway killed now may hold. */
  get inFlight(): number {
    return this.pending.size
  }

  get unacknowledged(): number {
    return this.generated - this.published.length
  }

  /** Stops posting and waits (bounded) for the posts still being retried. */
  async stop(timeoutMs = 60_000): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
    this.sender.giveUpAfter(timeoutMs)
    while (this.pending.size > 0) await Promise.allSettled([...this.pending])
  }

  private fire(): void {
    this.generated++
    const text = `ads fault post ${++this.seq}`
    const run = this.post(text).then(
      (id) => {
        if (id !== undefined) this.published.push(id)
      },
      (err: unknown) => {
        this.refused ??= err as Error
      }
    )
    this.pending.add(run)
    void run.finally(() => this.pending.delete(run))
  }

  private post(text: string): Promise<string | undefined> {
    const { app, user, token, accountId } = this.options
    return this.sender.send(async (base) => {
      const url = new URL(`/12/accounts/${accountId}/tweet`, base)
      url.searchParams.set('as_user_id', user.id)
      url.searchParams.set('nullcast', 'false')
      url.searchParams.set('text', text)
      this.attempts++
      const authorization = authorizationHeader('POST', url.toString(), { key: app.consumer_key, secret: app.consumer_secret }, { key: token.token, secret: token.secret })
      const res = await fetch(url, { method: 'POST', headers: { authorization }, signal: AbortSignal.timeout(this.options.requestTimeoutMs ?? 5000) })
      const body = await res.text()
      if (res.status !== 200) return retryOrRefuse(res.status, `the gateway refused a well-formed post with ${res.status}: ${body.slice(0, 300)}`)
      const id = (JSON.parse(body) as { data?: { id_str?: string } }).data?.id_str
      if (typeof id !== 'string') throw new Refused(`ads post answered 200 without data.id_str: ${body.slice(0, 200)}`)
      return id
    })
  }
}

/**
 * An ads account owned by the tenant's user and a running AdsPostLoad on it,
 * stopped at teardown. createAccount only writes the account's records: the
 * test's own Redis store is all the context it needs.
 */
export async function startAdsLoad(t: Test, system: SystemView, tenant: Tenant, targets: () => string[], options: { rate?: number; requestTimeoutMs?: number } = {}): Promise<{ load: AdsPostLoad; accountId: string }> {
  const account = await createAccount({ store: system.store } as unknown as ServiceContext, tenant.user.id, { name: 'fault tests' })
  const load = new AdsPostLoad({ targets, app: tenant.app, user: tenant.user, token: tenant.token, accountId: account.id, ...options, rate: options.rate ?? 5 }).start()
  t.teardown(() => load.stop(0))
  return { load, accountId: account.id }
}
