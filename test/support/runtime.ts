import path from 'node:path'
import type { Test } from 'tap'
import { MemoryBus } from '../../services/common/bus/memory'
import type { Bus } from '../../services/common/bus/types'
import { type Config, loadConfig } from '../../services/common/config'
import { createContext } from '../../services/common/context'
import { createLogger } from '../../services/common/logger'
import { startRuntime, type Runtime } from '../../services/common/runtime'
import type { ServiceDefinition } from '../../services/common/service'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import type { AccessLevel, AccessToken, App, User } from '../../services/common/auth/records'
import { createApp, createUser, issueAccessToken, issueBearer } from '../../services/gateway/identity'
import { ALL_SERVICES } from '../../services/embedded/services'
import { tempDir } from './util'

/**
 * Builds the gateway for tests the way `make run` does (embedded: every
 * service, memory bus, journaled memory store) on free loopback ports, or
 * with the services, bus and store a test passes (real Kafka / Redis from
 * test/support). The runtime is closed when the test ends.
 */

export function testConfig(t: Test, env: Record<string, string> = {}): Config {
  return loadConfig({
    PORT: '0',
    SANDBOX_PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    DATA_DIR: tempDir(t),
    WEBHOOK_ALLOW_INSECURE: 'true',
    ...env
  })
}

export interface StartOptions {
  services?: ServiceDefinition[]
  env?: Record<string, string>
  bus?: Bus
  store?: Store
  serviceName?: string
}

export async function startTestRuntime(t: Test, options: StartOptions = {}): Promise<Runtime> {
  const config = testConfig(t, options.env)
  const log = createLogger(config.logLevel, options.serviceName ?? 'test')
  const store = options.store ?? (await MemoryStore.open(path.join(config.dataDir, 'state')))
  const bus = options.bus ?? new MemoryBus(config.busPartitions, log)
  const ctx = await createContext({ serviceName: options.serviceName ?? 'test', config, bus, store, log })
  const runtime = await startRuntime({ services: options.services ?? ALL_SERVICES, ctx })
  t.teardown(() => runtime.close())
  return runtime
}

export interface TestIdentity {
  app: App
  user: User
  password: string
  token: AccessToken
  bearer: string
}

let counter = 0

/** An app, a user with an access token on it, and the app's bearer token. */
export async function createIdentity(store: Store, options: { access?: AccessLevel; screenName?: string; app?: App } = {}): Promise<TestIdentity> {
  counter++
  const app = options.app ?? (await createApp(store, { name: `test app ${counter}`, access_level: options.access ?? 'read-write-dm', callback_urls: ['http://127.0.0.1/callback'] }))
  const password = 'correct horse battery'
  const user = await createUser(store, options.screenName ?? `user_${process.pid % 10000}_${counter}`, password)
  const token = await issueAccessToken(store, app, user, options.access ?? app.access_level)
  const { token: bearer } = await issueBearer(store, app)
  return { app, user, password, token, bearer }
}
