import type { Runtime } from '../../services/common/runtime'

/**
 * Reading Prometheus metrics in tests: the one parser of the text format,
 * matching a sample by its exact name and exact label values.
 */

/** The metrics of a runtime's own registry, as /metrics serves them. */
export async function metricsText(rt: Runtime): Promise<string> {
  return rt.ctx.metrics.metrics()
}

/** GET `${baseUrl}/metrics` (a runtime in this process or another). */
export async function scrapeMetrics(baseUrl: string): Promise<string> {
  return (await fetch(`${baseUrl}/metrics`)).text()
}

/**
 * Sum of the samples named exactly `name` that carry every label of `labels`
 * with exactly that value (other labels, such as `service`, may differ), read
 * from the Prometheus text, e.g. metricValue(text, 'webhook_deliveries_total', { outcome: 'delivered' }).
 * 0 when there is none.
 */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (!m || m[1] !== name) continue
    const have: Record<string, string> = {}
    for (const pair of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) have[pair[1] as string] = pair[2] as string
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3])
  }
  return sum
}

/** metricValue of what `${baseUrl}/metrics` serves now. */
export async function scrapedValue(baseUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metricValue(await scrapeMetrics(baseUrl), name, labels)
}
