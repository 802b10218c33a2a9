import { ConfigError, loadConfig } from './config'
import { createContext } from './context'
import { closeOnSignals, startRuntime } from './runtime'
import type { ServiceDefinition } from './service'

/**
 * Process entry shared by every `services/<name>/main.ts` and the embedded
 * runtime: load config (refusing to start on an invalid one), build the
 * context, serve, and shut down gracefully on SIGTERM.
 */
export async function runMain(name: string, services: ServiceDefinition[]): Promise<void> {
  let config
  try {
    config = loadConfig(process.env, {}, { server: true })
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${name}: refusing to start: ${err.message}\n`)
      process.exit(2)
    }
    throw err
  }
  const ctx = await createContext({ serviceName: name, config })
  const runtime = await startRuntime({ services, ctx })
  closeOnSignals(runtime)
  const lines = [`${name} ready (store: ${ctx.store.kind}, bus: ${ctx.bus.kind})`, `  {base_url} and {ads_url}: ${runtime.baseUrl}`]
  if (runtime.sandboxUrl) lines.push(`  {ads_sandbox_url}:       ${runtime.sandboxUrl}`)
  lines.push(`  health: ${runtime.baseUrl}/healthz   metrics: ${runtime.baseUrl}/metrics`)
  process.stdout.write(`${lines.join('\n')}\n`)
}
