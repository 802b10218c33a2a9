import type { Gone } from './types'

/**
 * Messages gone and positions reset, added up by group, topic and partition:
 * what a Kafka bus's consumers meet (kept by the bus, so a closed or
 * restarted consumer's count stays), and what `make lag` adds up over the
 * processes of `make up`.
 */
export class GoneCounts {
  private readonly byKey = new Map<string, Gone>()

  count(group: string, topic: string, partition: number, what: 'messages' | 'resets', n: number): void {
    const key = `${group}\u0000${topic}\u0000${partition}`
    const entry = this.byKey.get(key) ?? { group, topic, partition, messages: 0, resets: 0 }
    entry[what] += n
    this.byKey.set(key, entry)
  }

  /** Adds another process's report (one from before resets were counted has none). */
  add(g: Gone): void {
    this.count(g.group, g.topic, g.partition, 'messages', g.messages)
    this.count(g.group, g.topic, g.partition, 'resets', g.resets ?? 0)
  }

  list(): Gone[] {
    return [...this.byKey.values()].map((g) => ({ ...g }))
  }
}
