import fs from 'node:fs'
import path from 'node:path'
import type { Test } from 'tap'
import YAML from 'yaml'

/** What the deploy/ tests share: where deploy/ is, and compose files read as `docker compose` reads them. */

export const DEPLOY = path.resolve(__dirname, '..', '..', 'deploy')

export interface ComposeService {
  image?: string
  command?: string[]
  environment?: Record<string, string>
  restart?: string
  healthcheck?: { test?: string[] }
  depends_on?: Record<string, { condition?: string }>
  volumes?: string[]
  profiles?: string[]
}

/** Compose's own tags (`!override` replaces what the file it overlays says instead of merging). */
export const COMPOSE_TAGS = [{ tag: '!override', collection: 'map' as const, nodeClass: YAML.YAMLMap }]

export function readCompose(t: Test, file: string): { services: Record<string, ComposeService>; overridden: Set<string> } {
  const doc = YAML.parseDocument(fs.readFileSync(path.join(DEPLOY, file), 'utf8'), { merge: true, customTags: COMPOSE_TAGS })
  t.same([...doc.errors, ...doc.warnings].map((e) => e.message), [], `${file} parses`)
  const services = (doc.toJS() as { services: Record<string, ComposeService> }).services
  const overridden = new Set(Object.keys(services).filter((name) => (doc.getIn(['services', name, 'depends_on'], true) as { tag?: string } | undefined)?.tag === '!override'))
  return { services, overridden }
}

/** `docker compose -f base -f overlay`, for what these checks read: environments merge, depends_on merges unless `!override`. */
export function composeMerge(base: Record<string, ComposeService>, overlay: { services: Record<string, ComposeService | null>; overridden: Set<string> }): Record<string, ComposeService> {
  const out = { ...base }
  for (const [name, given] of Object.entries(overlay.services)) {
    const o = given ?? {}
    const b = out[name] ?? {}
    const dependsOn = overlay.overridden.has(name) ? o.depends_on : { ...b.depends_on, ...o.depends_on }
    out[name] = { ...b, ...o, environment: { ...b.environment, ...o.environment }, ...(dependsOn ? { depends_on: dependsOn } : {}) }
  }
  return out
}

export const list = (value: string | undefined): string[] => (value ?? '').split(',').filter((x) => x !== '').sort()
