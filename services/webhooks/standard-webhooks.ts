import type { Store } from '../common/store/types'
import { withLock } from './app-lock'
import { WebhookKeys } from './keys'
import type { Webhook, WebhookRegistry } from './registry'
import { newStandardSecret } from './signature'

/**
 * Standard Webhooks signing, opt-in per webhook (docs/webhooks.md "Standard
 * Webhooks"): turning it on, off, and rotating the secret. The secrets live
 * in the webhook's config hash; a new one is handed out once, in the answer
 * that made it, and never shown again.
 *
 * A rotation keeps the secret it replaces for an overlap (ROTATION_OVERLAP_MS
 * unless the caller asks for less, down to none for a leaked secret), during
 * which every delivery is signed with both, so receivers can switch to the
 * new secret at their own pace. Only one previous secret is kept: a second
 * rotation within the overlap drops the oldest.
 */

/** How long the secret a rotation replaces is still signed with: 24 hours. */
export const ROTATION_OVERLAP_MS = 24 * 3_600_000

/** What the API and the console may show of a webhook's signing: never a secret, except `secret` in the answer that created it. */
export interface SigningView {
  enabled: boolean
  secret?: string
  previous_secret_expires_at?: string
}

/** The secrets a delivery made at `now` is signed with: the current one first, then the previous one during its overlap. */
export function activeSecrets(w: Webhook, now = Date.now()): string[] {
  if (!w.signing_secret) return []
  const out = [w.signing_secret]
  if (w.previous_signing_secret && w.previous_signing_secret_until && Date.parse(w.previous_signing_secret_until) > now) out.push(w.previous_signing_secret)
  return out
}

/** The webhook's signing state without its secrets. */
export function signingView(w: Webhook, now = Date.now()): SigningView {
  const view: SigningView = { enabled: w.signing_secret !== undefined }
  if (activeSecrets(w, now).length > 1 && w.previous_signing_secret_until) view.previous_secret_expires_at = w.previous_signing_secret_until
  return view
}

export class NotSigningError extends Error {
  constructor(readonly webhookId: string) {
    super(`Standard Webhooks signing is not enabled for webhook ${webhookId}.`)
    this.name = 'NotSigningError'
  }
}

export interface SigningChange {
  webhook: Webhook
  /** The new secret (shown once); undefined when nothing new was made. */
  secret?: string
}

/**
 * Changes of a webhook's secrets, each under the webhook's signing lock so
 * that two at once (an API call and a console click) cannot hand out a
 * secret the other one then overwrites. undefined: the webhook is gone.
 */
export class StandardSigning {
  constructor(
    private readonly store: Store,
    private readonly registry: WebhookRegistry
  ) {}

  private locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return withLock(this.store, WebhookKeys.signingLock(id), fn)
  }

  /** Turns signing on with a new secret; already on, nothing changes (its secret was shown when it was turned on). */
  enable(id: string): Promise<SigningChange | undefined> {
    return this.locked(id, async () => {
      const w = await this.registry.get(id)
      if (!w) return undefined
      if (w.signing_secret) return { webhook: w }
      const secret = newStandardSecret()
      const webhook = await this.registry.update(id, { set: { signing_secret: secret }, clear: ['previous_signing_secret', 'previous_signing_secret_until'] })
      return webhook && { webhook, secret }
    })
  }

  /** Turns signing off: the secrets are deleted, deliveries carry the platform's signature only. */
  disable(id: string): Promise<SigningChange | undefined> {
    return this.locked(id, async () => {
      const webhook = await this.registry.update(id, { clear: ['signing_secret', 'previous_signing_secret', 'previous_signing_secret_until'] })
      return webhook && { webhook }
    })
  }

  /** A new secret; the one it replaces is signed with for `overlapMs` more (none: dropped now). Throws NotSigningError when signing is off. */
  rotate(id: string, overlapMs = ROTATION_OVERLAP_MS): Promise<SigningChange | undefined> {
    return this.locked(id, async () => {
      const w = await this.registry.get(id)
      if (!w) return undefined
      if (!w.signing_secret) throw new NotSigningError(id)
      const secret = newStandardSecret()
      const webhook =
        overlapMs > 0
          ? await this.registry.update(id, {
              set: { signing_secret: secret, previous_signing_secret: w.signing_secret, previous_signing_secret_until: new Date(Date.now() + overlapMs).toISOString() }
            })
          : await this.registry.update(id, { set: { signing_secret: secret }, clear: ['previous_signing_secret', 'previous_signing_secret_until'] })
      return webhook && { webhook, secret }
    })
  }
}
