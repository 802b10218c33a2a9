/**
 * A CPU profile of the whole life of a process, for processes whose command
 * line the bench does not write (supervisord starts `node main.js`):
 * loaded with NODE_OPTIONS=--require (Node refuses --cpu-prof there), it
 * starts V8's profiler through the inspector and writes
 * `<CPU_PROFILE_DIR>/<service>-<pid>.cpuprofile` when the process exits
 * (a service exits after SIGTERM's graceful shutdown).
 */
import fs from 'node:fs'
import { Session } from 'node:inspector'
import path from 'node:path'

const dir = process.env.CPU_PROFILE_DIR
if (dir) {
  const session = new Session()
  session.connect()
  session.post('Profiler.enable')
  session.post('Profiler.start')
  process.on('exit', () => {
    // An in-process session answers synchronously: the profile is in hand before the process is gone.
    session.post('Profiler.stop', (err, result) => {
      if (err || !result) return
      const main = process.argv[1] ?? 'node'
      const name = path.basename(main) === 'main.js' ? path.basename(path.dirname(main)) : path.basename(main, '.js')
      fs.writeFileSync(path.join(dir, `${name}-${process.pid}.cpuprofile`), JSON.stringify(result.profile))
    })
  })
}
