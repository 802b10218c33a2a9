/**
 * The delivery path of the webhooks service, one stage per module, in the
 * order a delivery lives them (docs/webhooks.md "The delivery path"):
 *
 *   consumer.ts     bus batches (activity.deliveries, activity.events) -> deliveries
 *   messages.ts       the two topics' shapes and the guards that skip unusable messages
 *   usage-gate.ts   counted against the app's caps, or held while it is over one
 *   intake.ts       what a batch reads before it is written; a delivery's first record
 *   engine.ts       DeliveryEngine: makes a batch durable, starts attempts, runs scheduler passes
 *   first-attempt.ts  a first attempt made before anything of its delivery is stored
 *   lanes.ts        per-webhook concurrency in this process
 *   claims.ts       a scheduler pass's claims: who may attempt a due delivery
 *   attempt.ts      one signed POST and what its outcome writes
 *   retry-policy.ts   when the next attempt is due; the dead-letter event
 *   attempt-log.ts    what the console keeps of each attempt
 *   schedule.ts     the retry schedule: the only module that names its keys
 *   rescheduling.ts moves from outside the attempt path (CRC passed again, re-send)
 *
 * The rest of the service (core, workers, replay, console) uses the path
 * through this index; account-activity.ts and metrics.ts, which stages import
 * themselves, name the one module they need.
 */

export { DeliveryEngine, type EngineDeps, type EngineOptions } from './engine'
export { UsageGate, HeldKeys, RELEASE_EVERY_MS, type GateResult } from './usage-gate'
export { type AcceptResult, type NewDelivery, type Prepared } from './intake'
export { AttemptLog, recordEventType, type TailEntry } from './attempt-log'
export { onDeliveries, onEvents, type ConsumerDeps } from './consumer'
export { FIRST_ATTEMPT_HANDOVER_MS } from './first-attempt'
