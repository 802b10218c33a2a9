import t from 'tap'
import { processesFromLog, restartCounts } from '../../scripts/supervisor'

// Lines as supervisord 4.2 (Debian bookworm) writes them at loglevel=info.
const LOG = `2026-11-26 21:48:54,258 INFO spawned: 'activity-1' with pid 15638
2026-11-26 21:48:54,259 INFO spawned: 'activity-2' with pid 15639
2026-11-26 21:48:54,362 INFO spawned: 'nginx' with pid 15645
2026-11-26 21:48:55,364 INFO success: activity-1 entered RUNNING state, process has stayed up for > than 1 seconds (startsecs)
2026-11-26 21:48:55,364 INFO success: activity-2 entered RUNNING state, process has stayed up for > than 1 seconds (startsecs)
2026-11-26 21:48:55,364 INFO success: nginx entered RUNNING state, process has stayed up for > than 1 seconds (startsecs)
2026-11-26 21:49:23,133 WARN exited: activity-1 (terminated by SIGKILL; not expected)
2026-11-26 21:49:23,863 INFO spawned: 'activity-1' with pid 15806
2026-11-26 21:49:25,001 WARN exited: activity-2 (exit status 1; not expected)
2026-11-26 21:50:06,012 INFO waiting for activity-1, activity-2, nginx to die
`

t.test('each program: its latest pid and whether it runs, from the log alone', async (t) => {
  const p = processesFromLog(LOG)
  t.same(p.get('activity-1'), { pid: 15806, state: 'STARTING' }, 'restarted, not yet up for startsecs')
  t.same(p.get('activity-2'), { pid: 15639, state: 'EXITED' }, 'exited on its own')
  t.same(p.get('nginx'), { pid: 15645, state: 'RUNNING' })
  t.equal(p.size, 3, 'the "waiting for ... to die" line names no state')

  const later = processesFromLog(`${LOG}2026-11-26 21:49:24,892 INFO success: activity-1 entered RUNNING state, process has stayed up for > than 1 seconds (startsecs)\n`)
  t.same(later.get('activity-1'), { pid: 15806, state: 'RUNNING' }, 'running once supervisord says so')
  t.same(Object.fromEntries(restartCounts(LOG)), { 'activity-1': 1, 'activity-2': 0, nginx: 0 })
})

t.test('an empty or foreign log names no process', async (t) => {
  t.equal(processesFromLog('').size, 0)
  t.equal(processesFromLog('supervisord started with pid 12\nRPC interface initialized\n').size, 0)
})
