import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import YAML from 'yaml'
import { SETTINGS } from '../../services/common/config'
import type { ServiceDefinition } from '../../services/common/service'
import { accountHistoryService } from '../../services/account-history/service'
import { activityService } from '../../services/activity/service'
import { gatewayService } from '../../services/gateway/service'
import { streamService } from '../../services/stream/service'
import { webhooksService } from '../../services/webhooks/service'
import { freeClusterPort } from '../../scripts/local-infra'
import { composeMerge, type ComposeService, DEPLOY, list, readCompose } from '../support/fixtures/deploy'

/**
 * deploy/'s Redis Cluster (compose overlay, Kubernetes manifests, config and
 * scripts): what can be checked without a container engine, and the config
 * and scripts run on six real Debian redis-server nodes.
 */

const SERVICES: ServiceDefinition[] = [gatewayService, webhooksService, activityService, streamService, accountHistoryService]

t.test('the compose Redis Cluster overlay: six nodes, created once with a replica each, named to every service', async (t) => {
  const knownEnv = new Set<string>(Object.values(SETTINGS).map((s) => s.env))
  const base = YAML.parse(fs.readFileSync(path.join(DEPLOY, 'compose.yaml'), 'utf8'), { merge: true }) as { services: Record<string, ComposeService> }
  const stack = composeMerge(base.services, readCompose(t, 'compose.redis-cluster.yaml'))
  const running = Object.entries(stack).filter(([, s]) => !s.profiles?.length)
  const nodes = running.filter(([, s]) => s.volumes?.some((v) => v.startsWith('./redis-cluster.conf:')))
  t.equal(nodes.length, 6, 'six Redis Cluster nodes run deploy/redis-cluster.conf')
  const addresses = nodes.map(([name]) => `${name}:6379`).sort()
  for (const [name, s] of nodes) {
    t.match(s.image, /^redis:7\./, `${name} runs Redis 7 (announced hostnames)`)
    t.ok(s.command?.some((c) => c.endsWith('/redis-cluster-node.sh')) && s.volumes?.some((v) => v.startsWith('./redis-cluster-node.sh:')), `${name} starts through redis-cluster-node.sh`)
    t.equal(s.environment?.REDIS_CLUSTER_HOSTNAME, name, `${name} announces the name the services resolve`)
    t.same(list(s.environment?.REDIS_CLUSTER_PEERS), addresses, `${name} knows every node's name`)
  }
  const dataVolumes = nodes.map(([, s]) => s.volumes?.find((v) => v.endsWith(':/data')))
  t.ok(dataVolumes.every((v) => v !== undefined) && new Set(dataVolumes).size === 6, 'each node has a data volume of its own')

  const create = stack['redis-cluster-create']
  t.ok(create?.volumes?.some((v) => v.startsWith('./redis-cluster-create.sh:')) && create.command?.some((c) => c.endsWith('/redis-cluster-create.sh')), 'redis-cluster-create runs deploy/redis-cluster-create.sh')
  t.equal(create?.restart, 'no', 'redis-cluster-create runs once per up')
  t.same(list(create?.environment?.REDIS_CLUSTER_PEERS), addresses, 'redis-cluster-create joins every node')
  for (const [name] of nodes) t.equal(create?.depends_on?.[name]?.condition, 'service_healthy', `redis-cluster-create waits for ${name}`)
  t.match(fs.readFileSync(path.join(DEPLOY, 'redis-cluster-create.sh'), 'utf8'), /redis-cli --cluster create \$nodes --cluster-replicas 1 --cluster-yes/, 'a replica for each master')

  t.ok(stack.redis?.profiles?.length, 'the single Redis is left out')
  const ours = running.filter(([, s]) => s.image?.startsWith('activity-gateway') && s.restart === 'unless-stopped')
  t.same(ours.map(([name]) => name).sort(), SERVICES.map((s) => s.name).sort(), 'every service runs on the cluster')
  for (const [name, s] of ours) {
    t.same(list(s.environment?.REDIS_CLUSTER_NODES), addresses, `${name}: REDIS_CLUSTER_NODES names every node`)
    t.equal(s.depends_on?.['redis-cluster-create']?.condition, 'service_completed_successfully', `${name} starts once the cluster is ok`)
    for (const key of Object.keys(s.environment ?? {})) t.ok(knownEnv.has(key), `${name}: ${key} is a setting`)
  }
  for (const [name, s] of running) {
    if (s.restart === 'unless-stopped' || s.restart === 'always') t.ok(s.healthcheck?.test, `${name} has a healthcheck`)
    // compose refuses to start a service that depends on one left out.
    for (const dep of Object.keys(s.depends_on ?? {})) t.ok(stack[dep] && !stack[dep].profiles?.length, `${name} depends on ${dep}, which runs`)
  }
})

interface K8sContainer {
  image: string
  command: string[]
  env?: Array<{ name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }>
  readinessProbe?: { exec?: { command: string[] } }
  lifecycle?: { preStop?: { exec?: { command: string[] } } }
  volumeMounts?: Array<{ name: string; mountPath: string }>
}
interface K8sPodSpec {
  containers: K8sContainer[]
  volumes?: Array<{ name: string; configMap?: { name: string } }>
}
interface K8sDoc {
  kind: string
  metadata: { name: string }
  data?: Record<string, string>
  spec: {
    clusterIP?: string
    publishNotReadyAddresses?: boolean
    selector?: Record<string, string> & { matchLabels?: Record<string, string> }
    serviceName?: string
    replicas?: number
    podManagementPolicy?: string
    maxUnavailable?: number
    template: { metadata: { labels: Record<string, string> }; spec: K8sPodSpec }
    volumeClaimTemplates?: Array<{ metadata: { name: string } }>
  }
}

t.test('the Kubernetes Redis Cluster: six named pods with volumes, created once, named to the services', async (t) => {
  const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(DEPLOY, 'k8s', 'redis-cluster.yaml'), 'utf8')).map((d) => d.toJS() as K8sDoc)
  const find = (kind: string): K8sDoc => docs.find((d) => d.kind === kind) ?? (t.fail(`redis-cluster.yaml has a ${kind}`), docs[0] as K8sDoc)
  const [cm, svc, sts, pdb, job] = ['ConfigMap', 'Service', 'StatefulSet', 'PodDisruptionBudget', 'Job'].map(find) as [K8sDoc, K8sDoc, K8sDoc, K8sDoc, K8sDoc]
  for (const file of ['redis-cluster.conf', 'redis-cluster-node.sh', 'redis-cluster-create.sh', 'redis-cluster-handover.sh']) t.equal(cm.data?.[file], fs.readFileSync(path.join(DEPLOY, file), 'utf8'), `the ConfigMap carries deploy/${file} as it is`)

  const labels = sts.spec.template.metadata.labels
  const selects = (selector: Record<string, string> | undefined): boolean => !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels[k] === v)
  t.ok(svc.spec.clusterIP === 'None' && svc.spec.publishNotReadyAddresses === true && selects(svc.spec.selector), 'a headless Service names every pod, ready or not')
  t.ok(sts.spec.serviceName === svc.metadata.name && sts.spec.replicas === 6, 'six pods named through it')
  t.equal(sts.spec.podManagementPolicy, 'Parallel', 'pods start together (ready needs all six)')
  t.ok(selects(pdb.spec.selector?.matchLabels) && pdb.spec.maxUnavailable === 1, 'the PodDisruptionBudget stops one node at a time')
  const addresses = Array.from({ length: sts.spec.replicas ?? 0 }, (_, i) => `${sts.metadata.name}-${i}.${svc.metadata.name}:6379`).sort()

  const pod = sts.spec.template.spec
  const redis = pod.containers[0] as K8sContainer
  const env = new Map((redis.env ?? []).map((e) => [e.name, e]))
  t.match(redis.image, /^redis:7\.2/, 'Redis 7.2')
  t.equal(env.get('POD_NAME')?.valueFrom?.fieldRef?.fieldPath, 'metadata.name', 'a pod knows its name')
  t.equal(env.get('REDIS_CLUSTER_HOSTNAME')?.value, `$(POD_NAME).${svc.metadata.name}`, 'and announces its stable DNS name')
  t.same(list(env.get('REDIS_CLUSTER_PEERS')?.value), addresses, 'every pod knows every pod')
  t.match(redis.readinessProbe?.exec?.command.join(' '), /cluster_state:ok.*master_link_status:up/, 'ready: cluster ok and, on a replica, synced')
  const configDir = (c: K8sContainer, spec: K8sPodSpec): string | undefined => {
    const volume = spec.volumes?.find((v) => v.configMap?.name === cm.metadata.name)
    return c.volumeMounts?.find((m) => m.name === volume?.name)?.mountPath
  }
  const runs = (c: K8sContainer, spec: K8sPodSpec, command: string[] | undefined, file: string): boolean => command?.[1] === `${configDir(c, spec) ?? '?'}/${file}` && cm.data?.[file] !== undefined
  t.ok(runs(redis, pod, redis.command, 'redis-cluster-node.sh') && redis.command.includes(`${configDir(redis, pod) ?? '?'}/redis-cluster.conf`), 'pods start redis-cluster-node.sh with the ConfigMap config')
  t.ok(runs(redis, pod, redis.lifecycle?.preStop?.exec?.command, 'redis-cluster-handover.sh'), 'a stopping master hands its slots over first')
  const data = sts.spec.volumeClaimTemplates?.[0]?.metadata.name
  t.ok(data && redis.volumeMounts?.some((m) => m.name === data && m.mountPath === '/data') && redis.command.join(' ').includes('--dir /data'), 'a volume of its own per pod holds the AOF and nodes.conf')

  const creator = job.spec.template.spec.containers[0] as K8sContainer
  t.ok(runs(creator, job.spec.template.spec, creator.command, 'redis-cluster-create.sh'), 'the Job runs redis-cluster-create.sh')
  t.same(list(creator.env?.find((e) => e.name === 'REDIS_CLUSTER_PEERS')?.value), addresses, 'the Job joins every pod by its DNS name')

  const config = YAML.parse(fs.readFileSync(path.join(DEPLOY, 'k8s', 'config.yaml'), 'utf8')) as K8sDoc
  t.same(list(config.data?.REDIS_CLUSTER_NODES), addresses, 'gateway-config: REDIS_CLUSTER_NODES names every pod')
})

/** Runs a command to its end (or kills it after timeoutMs): its exit code and output. */
function run(command: string, args: string[], env: Record<string, string>, timeoutMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr.on('data', (d: Buffer) => (out += d.toString()))
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.once('close', (code) => {
      clearTimeout(timer)
      resolve({ code, out })
    })
  })
}

t.test('deploy/redis-cluster.conf and the scripts run a real cluster: created once, back after every node changed address, handed over', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-deploy-cluster-'))
  const ports: number[] = []
  const taken = new Set<number>()
  for (let i = 0; i < 6; i++) {
    const port = await freeClusterPort(taken)
    taken.add(port).add(port + 10_000)
    ports.push(port)
  }
  // Each node on a loopback address of its own, as containers have: a restart on other addresses is a recreated stack.
  const net = 100 + Math.floor(Math.random() * 100)
  const ip = (round: number, i: number): string => `127.${net}.${round}.${i + 1}`
  const peers = (round: number): string => ports.map((p, i) => `${ip(round, i)}:${p}`).join(',')
  const running = new Map<number, ChildProcess>()
  const stop = async (i: number, signal: NodeJS.Signals): Promise<void> => {
    const child = running.get(i)
    running.delete(i)
    if (!child?.pid || child.exitCode !== null) return
    const exited = new Promise((resolve) => child.once('exit', resolve))
    process.kill(-child.pid, signal) // the node and its rejoin loop
    await exited
  }
  t.teardown(async () => {
    await Promise.all([...running.keys()].map((i) => stop(i, 'SIGKILL')))
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const cli = async (round: number, i: number, ...args: string[]): Promise<string> => (await run('redis-cli', ['-h', ip(round, i), '-p', String(ports[i]), ...args], {}, 5000)).out.trim()
  const start = async (round: number): Promise<void> => {
    for (let i = 0; i < 6; i++) {
      const nodeDir = path.join(dir, `node-${i}`)
      fs.mkdirSync(nodeDir, { recursive: true })
      const args = [path.join(DEPLOY, 'redis-cluster-node.sh'), path.join(DEPLOY, 'redis-cluster.conf'), '--bind', ip(round, i), '--bind-source-addr', ip(round, i), '--dir', nodeDir, '--logfile', path.join(nodeDir, 'log'), '--cluster-node-timeout', '1000']
      const env = { ...process.env, REDIS_PORT: String(ports[i]), REDIS_CLUSTER_HOSTNAME: ip(round, i), REDIS_CLUSTER_PEERS: peers(round) }
      running.set(i, spawn('sh', args, { env, detached: true, stdio: 'ignore' }))
    }
    for (let i = 0; i < 6; i++) {
      const deadline = Date.now() + 10_000
      while ((await cli(round, i, 'ping')) !== 'PONG' && Date.now() < deadline) await sleep(50)
    }
  }
  const create = (round: number): Promise<{ code: number | null; out: string }> => run('sh', [path.join(DEPLOY, 'redis-cluster-create.sh')], { REDIS_CLUSTER_PEERS: peers(round), REDIS_CLUSTER_WAIT: '30' }, 40_000)
  /** CLUSTER NODES as seen by node i: id, announced hostname, role, master id. */
  const clusterNodes = async (round: number, i: number): Promise<Array<{ id: string; hostname: string; role: string; master: string }>> =>
    (await cli(round, i, 'cluster', 'nodes')).split('\n').filter((l) => l !== '').map((line) => {
      const [id = '', address = '', flags = '', master = ''] = line.split(' ')
      return { id, hostname: address.split(',')[1] ?? '', role: /master/.test(flags) ? 'master' : 'replica', master }
    })

  await start(0)
  for (let i = 0; i < 6; i++) t.equal(await cli(0, i, 'ping'), 'PONG', `node ${i} runs on deploy/redis-cluster.conf`)
  const conf = fs.readFileSync(path.join(DEPLOY, 'redis-cluster.conf'), 'utf8')
  t.match(conf, /^cluster-node-timeout 5000$/m, 'cluster-node-timeout 5 s (1 s here, to be quick)')
  for (const [key, value] of [['cluster-enabled', 'yes'], ['cluster-config-file', 'nodes.conf'], ['appendonly', 'yes'], ['appendfsync', 'everysec'], ['aof-use-rdb-preamble', 'yes'], ['maxmemory-policy', 'noeviction'], ['repl-diskless-sync-delay', '0'], ['cluster-preferred-endpoint-type', 'hostname']]) {
    t.equal((await cli(0, 0, 'config', 'get', key as string)).split('\n')[1], value, `the node runs with ${key} ${value}`)
  }

  const first = await create(0)
  t.equal(first.code, 0, `the cluster is created: ${first.out.slice(-300)}`)
  t.match(first.out, /creating the cluster/, 'by redis-cli --cluster create')
  // Node 0 learns the replicas' roles by gossip, a moment after they took them.
  let created = await clusterNodes(0, 0)
  for (const deadline = Date.now() + 10_000; created.filter((n) => n.role === 'master').length > 3 && Date.now() < deadline; ) {
    await sleep(100)
    created = await clusterNodes(0, 0)
  }
  const masters = created.filter((n) => n.role === 'master')
  t.equal(masters.length, 3, 'three masters')
  t.ok(created.filter((n) => n.role === 'replica').every((r) => masters.some((m) => m.id === r.master)) && new Set(created.filter((n) => n.role === 'replica').map((r) => r.master)).size === 3, 'a replica of each')
  t.same(created.map((n) => n.hostname).sort(), ports.map((_, i) => ip(0, i)).sort(), 'each node announces its name to clients')
  const again = await create(0)
  t.ok(again.code === 0 && /the cluster exists/.test(again.out) && !/creating/.test(again.out), 'run again, it creates nothing')
  t.same((await clusterNodes(0, 0)).map((n) => n.id).sort(), created.map((n) => n.id).sort(), 'the same cluster')
  t.match(await cli(0, 0, '-c', 'set', 'deploy-probe', 'kept'), /OK/, 'a write')

  // Every node stops and comes back on a new address (docker compose down/up; pods rescheduled).
  await Promise.all([...running.keys()].map((i) => stop(i, 'SIGTERM')))
  await start(1)
  const back = await create(1)
  t.equal(back.code, 0, `the cluster is ok again, every replica synced: ${back.out.slice(-300)}`)
  t.same((await clusterNodes(1, 0)).map((n) => n.hostname).sort(), ports.map((_, i) => ip(1, i)).sort(), 'at the new addresses')
  t.equal(await cli(1, 0, '-c', 'get', 'deploy-probe'), 'kept', 'with its data (AOF)')

  // A stopping master (preStop) hands its slots to its replica.
  const master = (await clusterNodes(1, 0)).find((n) => n.role === 'master')
  const i = (await Promise.all(ports.map(async (_, j) => (await cli(1, j, 'cluster', 'myid')) === master?.id))).indexOf(true)
  const handover = await run('sh', [path.join(DEPLOY, 'redis-cluster-handover.sh')], { REDIS_CLUSTER_HOSTNAME: ip(1, i), REDIS_PORT: String(ports[i]) }, 20_000)
  t.equal(handover.code, 0, `handover ran: ${handover.out}`)
  const after = await clusterNodes(1, i)
  t.equal(after.find((n) => n.id === master?.id)?.role, 'replica', 'the master is now a replica')
  t.ok(after.some((n) => n.role === 'master' && n.master === '-' && after.find((m) => m.id === master?.id)?.master === n.id), 'of its former replica, now master')
})
