/**
 * bench/bus: produce + consume throughput and end-to-end latency of 1 KB
 * events, the in-memory bus (the baseline, same run) against Kafka through
 * kafkajs on librdkafka's mock cluster (3 brokers, 6 partitions, acks=all,
 * offsets resolved after every handled message and committed once per fetched
 * batch, as KafkaBus does in production; the memory bus here runs without a
 * journal).
 *
 *   node dist/bench/bus.js        (after `make build`; `make bench` runs it)
 *
 * Figures:
 *  - produce: publishMany in batches of BENCH_BUS_BATCH, nothing consuming;
 *  - produce+consume: one consumer group drains while the producer publishes;
 *    events/s from the first publish to the last event handled;
 *  - latency: single publishes paced at BENCH_BUS_RATE events/s, time from
 *    publish() called to the handler receiving the event, p50 / p99.
 * Bounded: every phase has a deadline (the run stays under ~60 s).
 */
import os from 'node:os'
import { performance } from 'node:perf_hooks'
import { KafkaBus } from '../services/common/bus/kafka'
import { MemoryBus } from '../services/common/bus/memory'
import type { Bus, BusMessage } from '../services/common/bus/types'
import { createLogger } from '../services/common/logger'
import { launchMockCluster, terminate } from '../scripts/local-infra'
import { percentile } from './support/stats'

const MEMORY_EVENTS = Number(process.env.BENCH_BUS_MEMORY_EVENTS ?? 50_000)
const KAFKA_EVENTS = Number(process.env.BENCH_BUS_KAFKA_EVENTS ?? 10_000)
const BATCH = Number(process.env.BENCH_BUS_BATCH ?? 100)
const RATE = Number(process.env.BENCH_BUS_RATE ?? 200)
const LATENCY_SECONDS = Number(process.env.BENCH_BUS_LATENCY_SECONDS ?? 4)
const PARTITIONS = 6
const KEYS = 64
const PHASE_DEADLINE_MS = 25_000

const log = createLogger(process.env.LOG_LEVEL ?? 'silent', 'bench-bus')
const padding = 'x'.repeat(1024 - JSON.stringify({ event_uuid: '00000000-0000-0000-0000-000000000000', seq: 0, sent: 0, payload: '' }).length - 12)

/** A 1 KB event (serialized). */
function event(seq: number): Record<string, unknown> {
  return { event_uuid: '00000000-0000-0000-0000-000000000000', seq, sent: performance.now(), payload: padding }
}


async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} not done within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

interface Figures {
  produce: number
  pipeline: number
  p50: number
  p99: number
  samples: number
}

let topicSeq = 0

async function measure(name: string, bus: Bus, events: number, newTopic: () => Promise<string>): Promise<Figures> {
  process.stdout.write(`${name}: ${events.toLocaleString()} events of ${JSON.stringify(event(0)).length} bytes\n`)

  // 1. produce only
  const produceTopic = await newTopic()
  let t0 = performance.now()
  for (let i = 0; i < events; i += BATCH) {
    await bus.publishMany(produceTopic, Array.from({ length: Math.min(BATCH, events - i) }, (_, j) => ({ key: `user-${(i + j) % KEYS}`, value: event(i + j) })))
  }
  const produce = events / ((performance.now() - t0) / 1000)
  process.stdout.write(`  produce           ${Math.round(produce).toLocaleString()} events/s\n`)

  // 2. produce + consume
  const pipeTopic = await newTopic()
  let handled = 0
  const consumer = await bus.subscribe({ groupId: `bench-${name}-pipe-${process.pid}`, topics: [pipeTopic], handler: async () => void handled++ })
  t0 = performance.now()
  for (let i = 0; i < events; i += BATCH) {
    await bus.publishMany(pipeTopic, Array.from({ length: Math.min(BATCH, events - i) }, (_, j) => ({ key: `user-${(i + j) % KEYS}`, value: event(i + j) })))
  }
  await until(() => handled >= events, PHASE_DEADLINE_MS, `${name} consume`)
  const pipeline = events / ((performance.now() - t0) / 1000)
  await consumer.close()
  process.stdout.write(`  produce+consume   ${Math.round(pipeline).toLocaleString()} events/s\n`)

  // 3. latency at a fixed rate
  const latencyTopic = await newTopic()
  const latencies: number[] = []
  const onEvent = async (m: BusMessage): Promise<void> => {
    latencies.push(performance.now() - (m.value as { sent: number }).sent)
  }
  const latencyConsumer = await bus.subscribe({ groupId: `bench-${name}-lat-${process.pid}`, topics: [latencyTopic], handler: onEvent })
  const total = RATE * LATENCY_SECONDS
  const start = performance.now()
  const pending: Array<Promise<void>> = []
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / RATE
    const wait = due - performance.now()
    if (wait > 0) await new Promise((r) => setTimeout(r, wait))
    pending.push(bus.publish(latencyTopic, `user-${i % KEYS}`, event(i)))
  }
  await Promise.all(pending)
  await until(() => latencies.length >= total, PHASE_DEADLINE_MS, `${name} latency`)
  await latencyConsumer.close()
  const sorted = [...latencies].sort((a, b) => a - b)
  const figures = { produce, pipeline, p50: percentile(sorted, 50), p99: percentile(sorted, 99), samples: sorted.length }
  process.stdout.write(`  latency @${RATE}/s   p50 ${figures.p50.toFixed(2)} ms   p99 ${figures.p99.toFixed(2)} ms (${figures.samples} events)\n`)
  return figures
}

async function main(): Promise<void> {
  const started = Date.now()
  process.stdout.write(`bench/bus on ${os.cpus().length} cpu(s) (${os.cpus()[0]?.model ?? 'unknown'}), node ${process.version}\n\n`)

  const memory = new MemoryBus(PARTITIONS, log)
  const memoryFigures = await measure('memory', memory, MEMORY_EVENTS, async () => `bench.memory.${++topicSeq}`)
  await memory.close()

  const topics = Array.from({ length: 3 }, (_, i) => `bench.kafka.${i + 1}`)
  const cluster = await launchMockCluster({ brokers: 3, detach: false, topics: topics.map((t) => `${t}:${PARTITIONS}`) })
  let kafkaFigures: Figures | undefined
  let kafkaError: string | undefined
  try {
    const bus = await KafkaBus.connect({ brokers: cluster.bootstrap, clientId: 'bench-bus', log, sessionTimeoutMs: 10_000, heartbeatIntervalMs: 1000, maxWaitTimeMs: 50 })
    try {
      let next = 0
      kafkaFigures = await measure('kafka', bus, KAFKA_EVENTS, async () => topics[next++] as string)
    } finally {
      await bus.close()
    }
  } catch (err) {
    kafkaError = (err as Error).message
    process.stdout.write(`  kafka failed: ${kafkaError}\n`)
  } finally {
    await terminate(cluster)
  }

  const fmt = (n: number | undefined): string => (n === undefined || Number.isNaN(n) ? 'n/a' : Math.round(n).toLocaleString('en-US'))
  const ms = (n: number | undefined): string => (n === undefined || Number.isNaN(n) ? 'n/a' : n.toFixed(2))
  const ratio = (a: number | undefined, b: number): string => (a === undefined ? 'n/a' : `${(a / b).toFixed(3)}x`)
  process.stdout.write('\n| 1 KB events | memory bus (baseline) | Kafka, mock cluster (3 brokers) | Kafka / memory |\n|---|---|---|---|\n')
  process.stdout.write(`| produce (events/s) | ${fmt(memoryFigures.produce)} | ${fmt(kafkaFigures?.produce)} | ${ratio(kafkaFigures?.produce, memoryFigures.produce)} |\n`)
  process.stdout.write(`| produce+consume (events/s) | ${fmt(memoryFigures.pipeline)} | ${fmt(kafkaFigures?.pipeline)} | ${ratio(kafkaFigures?.pipeline, memoryFigures.pipeline)} |\n`)
  process.stdout.write(`| latency p50 @${RATE}/s (ms) | ${ms(memoryFigures.p50)} | ${ms(kafkaFigures?.p50)} | ${ratio(kafkaFigures?.p50, memoryFigures.p50)} |\n`)
  process.stdout.write(`| latency p99 @${RATE}/s (ms) | ${ms(memoryFigures.p99)} | ${ms(kafkaFigures?.p99)} | ${ratio(kafkaFigures?.p99, memoryFigures.p99)} |\n`)
  process.stdout.write(`\ntotal ${((Date.now() - started) / 1000).toFixed(1)} s\n`)
  if (kafkaError) process.exitCode = 1
}

main().catch((err: unknown) => {
  process.stderr.write(`bench/bus failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
