import type { ServiceContext } from '../../../common/context'
import type { Worker } from '../../../common/service'
import type { StoreOp } from '../../../common/store/types'
import { commitEntityChanges } from '../entities'
import { evaluateFilters } from './filters'
import { withLock } from './lock'
import { allProducts, catalogChange, CatalogKeys, getProductSet, publicProductSet, type StoredProductSet, SYSTEM_ACTOR } from './store'

/**
 * Background evaluation of FILTERED product sets: PROCESSING -> DONE, or
 * FAILED when the filters cannot be decided over the catalog.
 *
 * Why a store-backed queue polled by a timer rather than an in-memory job
 * list or a topic: the request that creates a set (or changes products) only
 * adds `{catalog}:{set}` to the sorted set `ads:catalog:eval-queue`; any
 * gateway process running this worker takes due jobs with an atomic pop, so
 * a job is evaluated once even with several gateways, survives a restart
 * (the queue is in Redis or the journaled memory store), and re-queuing an
 * already queued set is free (one zset member per set). Every evaluation
 * reads the catalog as it is when it runs, and a version number on the set
 * stops a slow, stale evaluation from overwriting a newer request.
 */

export const EVALUATOR_NAME = 'catalog-product-set-evaluator'
const BATCH = 20
const MAX_ATTEMPTS = 3
const LEASE_MS = 60_000

function attemptsKey(member: string): string {
  return `ads:catalog:eval-attempts:${member}`
}

/** Evaluates one queued set; returns how the attempt ended. */
export async function evaluateProductSet(ctx: ServiceContext, catalogId: string, setId: string): Promise<'done' | 'failed' | 'skipped'> {
  const queued = await getProductSet(ctx, catalogId, setId)
  if (!queued || queued.type !== 'FILTERED') return 'skipped'
  const version = queued.eval_version
  const products = await allProducts(ctx, catalogId)
  const result = evaluateFilters(queued.filters, products)
  return withLock(ctx.store, CatalogKeys.lock(catalogId), async () => {
    const current = await getProductSet(ctx, catalogId, setId)
    // Deleted meanwhile, or re-queued with newer products: the newer job decides.
    if (!current || current.eval_version !== version) return 'skipped'
    const next: StoredProductSet = result.ok
      ? { ...current, processing_status: 'DONE', product_ids: result.productIds }
      : { ...current, processing_status: 'FAILED', product_ids: [] }
    await commitSetChange(ctx, current, next)
    if (!result.ok) ctx.log.warn({ catalogId, setId, reason: result.reason }, 'product set evaluation failed')
    return result.ok ? 'done' : 'failed'
  })
}

/** Writes the set with its UPDATE entity change (by the system) in one batch. Call under the catalog's lease. */
async function commitSetChange(ctx: ServiceContext, current: StoredProductSet, next: StoredProductSet): Promise<void> {
  const write: StoreOp = { op: 'set', key: CatalogKeys.set(next.catalog_id, next.id), value: JSON.stringify(next) }
  const catalog = await ctx.store.getJson<{ user_id: string }>(CatalogKeys.catalog(next.catalog_id))
  if (!catalog) {
    await ctx.store.batch([write])
    return
  }
  const [before, after] = await Promise.all([publicProductSet(ctx, current), publicProductSet(ctx, next)])
  await commitEntityChanges(ctx, [write], [catalogChange(catalog.user_id, 'PRODUCT_SET', 'UPDATE', next.id, { ...after }, { ...before }, SYSTEM_ACTOR)])
}

async function markFailed(ctx: ServiceContext, catalogId: string, setId: string): Promise<void> {
  await withLock(ctx.store, CatalogKeys.lock(catalogId), async () => {
    const current = await getProductSet(ctx, catalogId, setId)
    if (current && current.processing_status === 'PROCESSING') {
      await commitSetChange(ctx, current, { ...current, processing_status: 'FAILED', product_ids: [] })
    }
  })
}

/** Takes due jobs and evaluates them; a job that errors is retried with backoff, then marked FAILED. */
export async function runDueEvaluations(ctx: ServiceContext, retryBaseMs: number): Promise<number> {
  const due = await ctx.store.zpopByScore(CatalogKeys.evalQueue, Date.now(), BATCH)
  // A popped job is put back as a lease due later: if this process dies mid-evaluation, another takes it over.
  const lease = Date.now() + LEASE_MS
  for (const { member } of due) await ctx.store.zadd(CatalogKeys.evalQueue, lease, member)
  for (const { member } of due) {
    const [catalogId, setId] = member.split(':') as [string, string]
    try {
      await evaluateProductSet(ctx, catalogId, setId)
      await ctx.store.del(attemptsKey(member))
      // Only drop our lease; a newer request (score changed) stays queued.
      if ((await ctx.store.zscore(CatalogKeys.evalQueue, member)) === lease) await ctx.store.zrem(CatalogKeys.evalQueue, member)
    } catch (err) {
      const attempts = await ctx.store.incr(attemptsKey(member), 1, 3_600_000)
      ctx.log.warn({ err, catalogId, setId, attempts }, 'product set evaluation error')
      if (attempts >= MAX_ATTEMPTS) {
        await ctx.store.del(attemptsKey(member))
        await ctx.store.zrem(CatalogKeys.evalQueue, member)
        await markFailed(ctx, catalogId, setId).catch((e) => ctx.log.error({ err: e, catalogId, setId }, 'could not mark product set FAILED'))
      } else {
        await ctx.store.zadd(CatalogKeys.evalQueue, Date.now() + retryBaseMs * 2 ** attempts, member)
      }
    }
  }
  return due.length
}

/**
 * The worker the gateway starts (services/gateway/service.ts `start`): polls
 * the queue every ADS_PRODUCT_SET_EVAL_INTERVAL, draining it while jobs are due.
 */
export function startProductSetEvaluator(ctx: ServiceContext, options: { intervalMs?: number } = {}): Worker {
  const intervalMs = options.intervalMs ?? ctx.config.productSetEvalIntervalMs
  let stopped = false
  let running: Promise<void> | undefined
  let timer: NodeJS.Timeout | undefined

  const tick = (): void => {
    if (stopped) return
    running = (async () => {
      try {
        while (!stopped && (await runDueEvaluations(ctx, intervalMs)) > 0) {
          // keep draining while jobs are due
        }
      } catch (err) {
        ctx.log.warn({ err }, 'product set evaluator tick failed')
      }
    })().finally(() => {
      running = undefined
      if (!stopped) timer = setTimeout(tick, intervalMs)
    })
  }
  timer = setTimeout(tick, 0)

  return {
    name: EVALUATOR_NAME,
    async close() {
      stopped = true
      if (timer) clearTimeout(timer)
      await running
    }
  }
}
