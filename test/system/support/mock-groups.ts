import fs from 'node:fs'

/**
 * What librdkafka's mock cluster said about its consumer groups, read from its
 * log when it runs with MOCK_CLUSTER_DEBUG=mock (test/support/mock-cluster.c).
 * A service that does not come back after a kill is most often a member that
 * cannot get through its group's rebalance: this names each group that is not
 * Up, and its last transitions, so a failure in CI's cut log still says where
 * the group stood.
 */

// %7|1795721296.867|MOCK|rdkafka#producer-1| [thrd:mock]: Mock consumer group g with 3 member(s) changing state Up -> Joining: member join
const LINE = /^%\d\|(\d+\.\d+)\|MOCK\|[^\]]*\]: (.*)$/
const STATE = /^Mock consumer group (\S+) with (\d+) member\(s\) changing state (\w+) -> (\w+): (.*)$/
const ELECTED = /^Consumer group (\S+) with (\d+) member\(s\) is rebalancing: elected leader is (\S+), generation id (\d+)$/
const TIMED_OUT = /^Member (\S+) session timed out for group (\S+)$/
const SYNCING = /^Mock consumer group (\S+): awaiting (\d+)\/(\d+) syncing members/
const FSM = /^Mock consumer group (\S+) FSM timeout in state (\w+)$/

interface GroupView {
  state: string
  since: number
  events: string[]
}

/** Group id → its last state and transitions, from the mock cluster's debug log. */
export function mockGroups(logText: string): Map<string, GroupView> {
  const groups = new Map<string, GroupView>()
  const view = (id: string): GroupView => {
    let g = groups.get(id)
    if (!g) {
      g = { state: 'Empty', since: 0, events: [] }
      groups.set(id, g)
    }
    return g
  }
  for (const raw of logText.split('\n')) {
    const m = LINE.exec(raw)
    if (!m) continue
    const at = Number(m[1])
    const text = m[2] as string
    const time = new Date(at * 1000).toISOString().slice(11, 23)
    let s: RegExpExecArray | null
    if ((s = STATE.exec(text))) {
      const g = view(s[1] as string)
      g.state = s[4] as string
      g.since = at
      g.events.push(`${time} ${s[3]} -> ${s[4]} (${s[2]} members: ${s[5]})`)
    } else if ((s = ELECTED.exec(text))) view(s[1] as string).events.push(`${time} leader ${s[3]}, generation ${s[4]}, ${s[2]} members`)
    else if ((s = TIMED_OUT.exec(text))) view(s[2] as string).events.push(`${time} member ${s[1]} session timed out`)
    else if ((s = SYNCING.exec(text))) view(s[1] as string).events.push(`${time} ${s[2]}/${s[3]} synced`)
    else if ((s = FSM.exec(text))) view(s[1] as string).events.push(`${time} timer fired in ${s[2]}`)
  }
  return groups
}

/** One paragraph: the groups not Up and those whose id starts with `prefix`, each with its last `last` events. */
export function describeMockGroups(logFile: string, options: { prefix?: string; last?: number; now?: number } = {}): string {
  if (!fs.existsSync(logFile)) return 'mock cluster log missing'
  const groups = mockGroups(fs.readFileSync(logFile, 'utf8'))
  if (groups.size === 0) return 'mock cluster log has no group lines (MOCK_CLUSTER_DEBUG unset?)'
  const now = (options.now ?? Date.now()) / 1000
  const shown = [...groups].filter(([id, g]) => g.state !== 'Up' || (options.prefix !== undefined && id.startsWith(options.prefix)))
  if (shown.length === 0) return `mock cluster: all ${groups.size} groups Up`
  return shown
    .map(([id, g]) => `mock group ${id}: ${g.state} for ${(now - g.since).toFixed(1)} s; ${g.events.slice(-(options.last ?? 8)).join('; ')}`)
    .join(' | ')
}
