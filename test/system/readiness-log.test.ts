import { spawn } from 'node:child_process'
import net from 'node:net'
import t from 'tap'
import { cpuFacts, probeError, processCpu, ReadinessLog } from './support/readiness-log'

t.test('consecutive equal outcomes are one run, with their count and span', async (t) => {
  const log = new ReadinessLog()
  const at = Date.parse('2026-11-26T21:41:55.000Z')
  log.note('not running', at)
  log.note('pid 7: ECONNREFUSED', at + 1000)
  log.note('pid 7: ECONNREFUSED', at + 1250)
  log.note('pid 7: ECONNREFUSED', at + 1500)
  log.note('pid 7: 503 consumer of group g has not joined its group', at + 2000)
  t.equal(
    log.summary(),
    'not running ×1 21:41:55.00, pid 7: ECONNREFUSED ×3 21:41:56.00–21:41:56.50, pid 7: 503 consumer of group g has not joined its group ×1 21:41:57.00'
  )
  t.match(log.summary(2), /^… pid 7: ECONNREFUSED ×3/, 'past the limit the oldest runs give way, marked')
  t.equal(new ReadinessLog().summary(), 'no probe')
})

t.test('a probe error reads as its cause', async (t) => {
  const sockets = new Set<net.Socket>()
  // Accepts, never answers.
  const server = net.createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => undefined)
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(() => server.close())
  const port = (server.address() as net.AddressInfo).port
  const silent = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(200) }).catch((err: Error) => err)
  t.equal(probeError(silent as Error, 200), 'no answer in 200 ms', 'a listener that does not answer')
  server.close()
  for (const s of sockets) s.destroy()
  await new Promise((r) => setTimeout(r, 50))
  const refused = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) }).catch((err: Error) => err)
  t.equal(probeError(refused as Error, 1000), 'ECONNREFUSED', 'nobody listening')
})

t.test('CPU time and age of a live process, from /proc', async (t) => {
  // Burns 300 ms of its own CPU time (however long that takes on a busy machine), says so, then idles until killed.
  const burn = 'const u = () => { const c = process.cpuUsage(); return (c.user + c.system) / 1000 }; const from = u(); while (u() - from < 300); process.stdout.write("burned\\n"); setInterval(() => {}, 1000)'
  const child = spawn(process.execPath, ['-e', burn], { stdio: ['ignore', 'pipe', 'ignore'] })
  t.teardown(() => void child.kill('SIGKILL'))
  await new Promise<void>((resolve) => child.stdout.on('data', (d: Buffer) => d.toString().includes('burned') && resolve()))
  await new Promise((r) => setTimeout(r, 500))
  const cpu = processCpu(child.pid as number)
  t.ok(cpu, 'read')
  t.ok(cpu && cpu.cpuSeconds >= 0.25 && cpu.cpuSeconds < 5, `about the CPU it burned: ${cpu?.cpuSeconds}`)
  t.ok(cpu && cpu.aliveSeconds >= 0.5 && cpu.aliveSeconds < 30, `about its age: ${cpu?.aliveSeconds}`)
  t.match(cpuFacts(child.pid), /^pid \d+: \d+\.\d CPU s in \d+ s alive; load \d+\.\d \d+\.\d \d+\.\d on \d+ cores$/)
  child.kill('SIGKILL')
  await new Promise((r) => child.once('exit', r))
  t.equal(processCpu(child.pid as number), undefined, 'a process gone has no figures')
  t.match(cpuFacts(undefined), /^load /, 'without a pid: the machine load alone')
})
