import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { whenGone } from '../support/sentinel'
import { eventually, sleep, tempDir } from '../support/util'

/**
 * test/support/sentinel.ts: the fault tests stop their `make up` with it when
 * the test process dies before its teardown (a tap timeout kills it): the
 * command runs once the watched process is gone, and not when cancelled.
 */

t.test('runs the command once the watched process is gone, and not after a cancel', async (t) => {
  const dir = tempDir(t, 'gw-sentinel-')
  const watchedA = spawn('sleep', ['30'], { stdio: 'ignore' })
  const watchedB = spawn('sleep', ['30'], { stdio: 'ignore' })
  t.teardown(() => {
    watchedA.kill('SIGKILL')
    watchedB.kill('SIGKILL')
  })
  const ranA = path.join(dir, 'a')
  const ranB = path.join(dir, 'b')
  whenGone(watchedA.pid as number, ['sh', '-c', `echo gone > ${ranA}`])
  const cancel = whenGone(watchedB.pid as number, ['sh', '-c', `echo gone > ${ranB}`])
  await sleep(700)
  t.notOk(fs.existsSync(ranA), 'nothing runs while the process lives')
  watchedA.kill('SIGKILL')
  await eventually(() => fs.existsSync(ranA), 5000, 50)
  t.equal(fs.readFileSync(ranA, 'utf8').trim(), 'gone', 'the command ran after a kill -9 of the watched process')
  cancel()
  watchedB.kill('SIGKILL')
  await sleep(1500)
  t.notOk(fs.existsSync(ranB), 'a cancelled sentinel runs nothing')
})
