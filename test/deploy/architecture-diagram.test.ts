import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import type { GroupOffsets } from '../../services/common/bus/types'
import { TOPICS } from '../../services/common/bus/types'
import { startTestRuntime } from '../support/runtime'

/**
 * The Mermaid diagram of docs/architecture.md against the code, so it cannot
 * drift silently: its services are the directories of services/ that are
 * services, its topics those of deploy/topics.json, each route family of
 * deploy/routes.json is on the edge from nginx to the service it names, each
 * consumer group the running system (embedded, every service) has is on the
 * edge from its topic to the service whose code names it, each producer edge
 * is a topic that service's code produces to, and each keyspace a service
 * owns or reads is a key prefix its code (or services/common) names.
 */

const ROOT = path.resolve(__dirname, '..', '..')
const NOT_SERVICES = new Set(['common', 'cli', 'embedded'])

interface Node {
  id: string
  label: string
  shape: 'box' | 'topic' | 'keyspace' | 'actor' | 'proxy'
}

interface Edge {
  from: string
  to: string
  arrow: '-->' | '==>' | '-.->'
  label: string
}

/** The one ```mermaid block of the document. */
function mermaidBlock(doc: string): string {
  const blocks = [...doc.matchAll(/^```mermaid\n([\s\S]*?)^```$/gm)].map((m) => m[1] as string)
  if (blocks.length !== 1) throw new Error(`expected one mermaid block in docs/architecture.md, found ${blocks.length}`)
  return blocks[0] as string
}

const SHAPES: Array<[RegExp, Node['shape']]> = [
  [/^(\w+)\[\["([^"]+)"\]\]$/, 'topic'],
  [/^(\w+)\[\("([^"]+)"\)\]$/, 'keyspace'],
  [/^(\w+)\(\["([^"]+)"\]\)$/, 'actor'],
  [/^(\w+)\{\{"([^"]+)"\}\}$/, 'proxy'],
  [/^(\w+)\["([^"]+)"\]$/, 'box']
]

/** Node definitions (one per line) and edges (`a & b -->|"label"| c`); anything else but subgraph/end/comments is refused. */
function parse(block: string): { kind: string; nodes: Map<string, Node>; edges: Edge[] } {
  const lines = block.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('%%'))
  const kind = lines.shift() ?? ''
  const nodes = new Map<string, Node>()
  const edges: Edge[] = []
  for (const line of lines) {
    if (/^subgraph \w+ \["[^"]+"\]$/.test(line) || line === 'end') continue
    const shape = SHAPES.find(([re]) => re.test(line))
    if (shape) {
      const m = shape[0].exec(line) as RegExpExecArray
      nodes.set(m[1] as string, { id: m[1] as string, label: m[2] as string, shape: shape[1] })
      continue
    }
    const edge = /^([\w &]+?)\s*(-->|==>|-\.->)\s*(?:\|"([^"]*)"\|)?\s*(\w+)$/.exec(line)
    if (!edge) throw new Error(`unreadable line in the diagram: ${line}`)
    for (const from of (edge[1] as string).split('&').map((s) => s.trim())) {
      edges.push({ from, to: edge[4] as string, arrow: edge[2] as Edge['arrow'], label: edge[3] ?? '' })
    }
  }
  for (const e of edges) for (const id of [e.from, e.to]) if (!nodes.has(id)) throw new Error(`edge names undefined node ${id}`)
  return { kind, nodes, edges }
}

const doc = fs.readFileSync(path.join(ROOT, 'docs', 'architecture.md'), 'utf8')
const diagram = parse(mermaidBlock(doc))
const labelOf = (id: string): string => diagram.nodes.get(id)?.label ?? id
const services = fs
  .readdirSync(path.join(ROOT, 'services'), { withFileTypes: true })
  .filter((d) => d.isDirectory() && !NOT_SERVICES.has(d.name))
  .map((d) => d.name)
  .sort()
const serviceNodes = [...diagram.nodes.values()].filter((n) => n.shape === 'box')

/** Every .ts file under services/<dir>, concatenated. */
function sourceOf(dir: string): string {
  const out: string[] = []
  const walk = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.name.endsWith('.ts')) out.push(fs.readFileSync(p, 'utf8'))
    }
  }
  walk(path.join(ROOT, 'services', dir))
  return out.join('\n')
}
const sources = new Map([...services, 'common'].map((s) => [s, sourceOf(s)]))

t.test('a Mermaid flowchart', async (t) => {
  t.match(diagram.kind, /^flowchart (LR|TD|TB|RL|BT)$/)
  t.ok(diagram.nodes.has('nginx') && diagram.nodes.get('nginx')?.shape === 'proxy', 'nginx, the front proxy, is drawn')
})

t.test('the services are the five of services/', async (t) => {
  t.same(services, ['account-history', 'activity', 'gateway', 'stream', 'webhooks'])
  t.same(serviceNodes.map((n) => n.label).sort(), services, 'one box per service, no other box')
})

t.test('the topics are those of deploy/topics.json', async (t) => {
  const topics = (JSON.parse(fs.readFileSync(path.join(ROOT, 'deploy', 'topics.json'), 'utf8')) as { topics: Array<{ name: string }> }).topics.map((x) => x.name).sort()
  const drawn = [...diagram.nodes.values()].filter((n) => n.shape === 'topic').map((n) => n.label).sort()
  t.same(drawn, topics)
  t.same(Object.values(TOPICS).sort(), topics, 'and those the code names (TOPICS)')
  for (const topic of topics) {
    const id = [...diagram.nodes.values()].find((n) => n.label === topic)?.id
    t.ok(diagram.edges.some((e) => e.to === id), `${topic} has a producer`)
    t.ok(diagram.edges.some((e) => e.from === id), `${topic} has a reader`)
  }
})

interface Route {
  prefix?: string
  pattern?: string
  service: string
}

/** `^/12/accounts/[^/]+/account_history(?:/|$)` -> `/12/accounts/:id/account_history`. */
function family(route: Route): string {
  if (route.prefix !== undefined) return route.prefix
  return (route.pattern as string).replace(/^\^/, '').replace(/\(\?:\/\|\$\)$/, '').replace(/\[\^\/\]\+/g, ':id')
}

t.test('every route family of deploy/routes.json is on the edge from nginx to its service, and nothing else is', async (t) => {
  const table = JSON.parse(fs.readFileSync(path.join(ROOT, 'deploy', 'routes.json'), 'utf8')) as { hosts: Record<string, { default: string; routes: Route[] }> }
  // What each nginx edge names: its items, a trailing "(...)" remark dropped.
  const drawn = new Map<string, string>()
  for (const e of diagram.edges.filter((x) => x.from === 'nginx')) {
    t.equal(e.arrow, '-->')
    for (const item of e.label.split(', ').map((s) => s.replace(/ \(.*\)$/, ''))) {
      t.notOk(drawn.has(item), `${item} is drawn once`)
      drawn.set(item, labelOf(e.to))
    }
  }
  const expected = new Map<string, string>()
  for (const [host, { default: fallback, routes }] of Object.entries(table.hosts)) {
    // The sandbox host's default is the gateway's sandbox listener.
    expected.set(host === 'api' ? 'default route' : `${host} host`, fallback.replace(/-sandbox$/, ''))
    for (const r of routes) {
      const f = family(r)
      t.ok(expected.get(f) === undefined || expected.get(f) === r.service, `${f} goes to one service on every host`)
      expected.set(f, r.service)
    }
  }
  for (const [f, service] of expected) t.equal(drawn.get(f), service, `${f} -> ${service}`)
  t.same([...drawn.keys()].filter((f) => !expected.has(f)), [], 'no route family that deploy/routes.json does not have')
})

t.test('consumer groups: every group of the running system, from its topic to the service whose code names it', async (t) => {
  const token = 'diagram-test-operator-token-0123456789'
  const runtime = await startTestRuntime(t, { env: { STREAM_NODE_ID: 'diagram-node', OPERATOR_TOKEN: token } })
  // What `make lag` reads: the operator route of the embedded runtime (`make run`).
  const res = await fetch(`${runtime.baseUrl}/admin/bus/lag`, { headers: { authorization: `Bearer ${token}` } })
  const offsets = ((await res.json()) as { groups: GroupOffsets[] }).groups
  const running = [...new Set(offsets.map((g) => `${g.group} ${g.topic}`))].map((s) => s.split(' ') as [string, string])
  t.ok(running.length >= 7, `the embedded system consumes with ${running.length} (group, topic) pairs`)
  const consumes = diagram.edges.filter((e) => diagram.nodes.get(e.from)?.shape === 'topic' && diagram.nodes.get(e.to)?.shape === 'box')
  // A stream node's group is stream-{node id}: drawn with the placeholder.
  const drawnGroup = (group: string): string => group.replace(/^stream-diagram-node$/, 'stream-{node id}')
  for (const [group, topic] of running) {
    const edge = consumes.find((e) => labelOf(e.from) === topic && e.label.split(', ')[0] === drawnGroup(group))
    t.ok(edge, `group ${group} on ${topic} is drawn`)
    if (!edge) continue
    const service = labelOf(edge.to)
    const named = group.startsWith('stream-') ? 'stream-${this.nodeId}' : `'${group}'`
    t.ok(sources.get(service)?.includes(named), `${service}'s code names the group ${group}`)
  }
  for (const e of consumes) {
    const group = e.label.split(', ')[0] as string
    t.ok(running.some(([g, topic]) => drawnGroup(g) === group && topic === labelOf(e.from)), `drawn group ${group} on ${labelOf(e.from)} runs`)
  }
})

t.test('producers: each drawn service produces to the topic in its code', async (t) => {
  const constName = new Map(Object.entries(TOPICS).map(([k, v]) => [v as string, k]))
  const produces = diagram.edges.filter((e) => diagram.nodes.get(e.from)?.shape === 'box' && diagram.nodes.get(e.to)?.shape === 'topic')
  t.ok(produces.length >= 5)
  for (const e of produces) {
    const service = labelOf(e.from)
    const topic = labelOf(e.to)
    const ref = `TOPICS.${constName.get(topic) ?? '?'}`
    t.match(sources.get(service) ?? '', new RegExp(`(publish(Many)?\\(\\s*|topic: )${ref.replace('.', '\\.')}\\b`), `${service} produces ${topic} (${ref})`)
  }
  for (const service of services) {
    for (const m of (sources.get(service) ?? '').matchAll(/(?:publish(?:Many)?\(\s*|topic: )TOPICS\.(\w+)/g)) {
      const topic = TOPICS[m[1] as keyof typeof TOPICS]
      t.ok(produces.some((e) => labelOf(e.from) === service && labelOf(e.to) === topic), `${service}'s code produces ${topic}: drawn`)
    }
  }
})

t.test('keyspaces: what a service owns or reads is a key prefix of its code or of services/common', async (t) => {
  const touches = diagram.edges.filter((e) => diagram.nodes.get(e.to)?.shape === 'keyspace')
  for (const e of touches) {
    const service = labelOf(e.from)
    t.ok(e.arrow === '==>' || e.arrow === '-.->', `${service} -> ${labelOf(e.to)}: owns (==>) or reads (-.->)`)
    for (const prefix of labelOf(e.to).split(' / ')) {
      const key = new RegExp(`['\`]${prefix.replace(/[-:]/g, (c) => `\\${c}`)}`)
      t.ok(key.test(sources.get(service) ?? '') || key.test(sources.get('common') ?? ''), `${service} ${e.arrow === '==>' ? 'owns' : 'reads'} ${prefix}`)
    }
  }
  const owners = new Map<string, string[]>()
  for (const e of touches.filter((x) => x.arrow === '==>')) owners.set(e.to, [...(owners.get(e.to) ?? []), labelOf(e.from)])
  for (const ks of [...diagram.nodes.values()].filter((n) => n.shape === 'keyspace')) t.equal(owners.get(ks.id)?.length, 1, `${ks.label} has one owner`)
  for (const service of services) t.ok(touches.some((e) => labelOf(e.from) === service && e.arrow === '==>'), `${service} owns a keyspace`)
})
