import type { ServiceContext } from '../../../common/context'
import type { Worker } from '../../../common/service'
import { startProductSetEvaluator } from '../catalog/evaluator'
import { startInsightsIngest } from './insights'
import { startTargetingIndexer } from './targeted'

/**
 * The background work of catalog management and audiences, for the gateway's
 * `start` (services/gateway/service.ts):
 *  - keyword-insights ingest: consumes `activity.events` (group gateway-keyword-insights);
 *  - audience targeting index: consumes `ads.entity-changes` (group gateway-audience-targeting);
 *  - product set evaluator: timer over the store-backed evaluation queue.
 */
export async function startAudienceBackgroundWork(ctx: ServiceContext): Promise<Worker[]> {
  const workers: Worker[] = []
  try {
    workers.push(await startInsightsIngest(ctx))
    workers.push(await startTargetingIndexer(ctx))
    workers.push(startProductSetEvaluator(ctx))
  } catch (err) {
    await Promise.allSettled(workers.map((w) => w.close()))
    throw err
  }
  return workers
}
