import type { CleanUp } from '../support/clean-up'
import { Observer } from './observers'
import { Publisher } from './publisher'
import { createCustomer, registerWebhook, type Customer, type System } from './systems'

/**
 * What bench/distributed and bench/faults measure a system with: one app and
 * user whose subscriptions cover every partition of activity.events, one
 * webhook on a receiver that verifies every signature, one stream consumer
 * (both in worker threads), and the publisher. Each is stopped by `cleanUp`.
 */
export interface Scene {
  system: System
  customer: Customer
  webhook: Observer
  stream: Observer
  publisher: Publisher
}

export async function openScene(system: System, followed: number, publish: ConstructorParameters<typeof Publisher>[3], cleanUp: CleanUp): Promise<Scene> {
  const base = await createCustomer(system, followed)
  const webhook = await Observer.start({ kind: 'webhook', secret: base.secret })
  cleanUp.add(() => webhook.stop())
  const customer = await registerWebhook(system, base, webhook.url ?? '')
  const stream = await Observer.start({ kind: 'stream', url: system.baseUrl, bearer: base.bearer })
  cleanUp.add(() => stream.stop())
  const publisher = new Publisher(system.baseUrl, system.operatorToken, base.users, publish)
  cleanUp.add(() => publisher.close())
  return { system, customer, webhook, stream, publisher }
}
