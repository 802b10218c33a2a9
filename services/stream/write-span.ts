import { batchSpan, type Context, type Span } from '../common/tracing'
import type { StreamConnection } from './connections'

/**
 * The span of one write of a line batch to one stream connection
 * (docs/operations.md "Tracing"): a child of the first line's delivery
 * (the matcher's span of its event), linked to the other lines' when the
 * batch holds deliveries of several traces. Its attributes say which
 * connection and how many lines, never what they hold.
 */
export function writeSpan(conn: StreamConnection, lines: number, traces: Array<Context | undefined>): Span | undefined {
  return batchSpan('stream.write', traces, {
    'gateway.connection_id': conn.id,
    'gateway.app_id': conn.appId,
    'gateway.transport': conn.transport,
    'gateway.lines': lines
  })
}
