import { describeErrors, type SchemaRegistry } from '../schemas'
import type { Bus, Consumer, Headers, OutgoingMessage, SubscribeOptions } from './types'

/** Thrown at publish when an event does not match `schemas/events/<topic>.json`. */
export class EventValidationError extends Error {
  constructor(readonly topic: string, readonly details: string) {
    super(`event refused for topic ${topic}: ${details}`)
    this.name = 'EventValidationError'
  }
}

/**
 * Validates every published value against its topic's schema before it
 * reaches the underlying bus, so no consumer ever sees a malformed event.
 * A topic without a schema is refused too: every topic must be described.
 */
export class ValidatingBus implements Bus {
  constructor(private readonly inner: Bus, private readonly schemas: SchemaRegistry) {}

  get kind(): Bus['kind'] {
    return this.inner.kind
  }

  /** The wrapped implementation (operator tools read lag from it). */
  get underlying(): Bus {
    return this.inner
  }

  private check(topic: string, value: unknown): void {
    const id = `events/${topic}`
    if (!this.schemas.has(id)) throw new EventValidationError(topic, `no schema schemas/${id}.json`)
    const validate = this.schemas.validator(id)
    if (!validate(value)) throw new EventValidationError(topic, describeErrors(validate.errors))
  }

  async publish(topic: string, key: string, value: unknown, headers?: Headers): Promise<void> {
    this.check(topic, value)
    await this.inner.publish(topic, key, value, headers)
  }

  async publishMany(topic: string, messages: OutgoingMessage[]): Promise<void> {
    for (const m of messages) this.check(topic, m.value)
    await this.inner.publishMany(topic, messages)
  }

  subscribe(options: SubscribeOptions): Promise<Consumer> {
    return this.inner.subscribe(options)
  }

  async health(): Promise<void> {
    await this.inner.health?.()
  }

  close(): Promise<void> {
    return this.inner.close()
  }
}
