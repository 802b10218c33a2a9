import client from 'prom-client'
import type { RecentBuffer } from './backfill'
import type { StreamConnection } from './connections'
import type { Lease } from './registry'

/** The stream node's Prometheus metrics (services/stream/hub.ts). */
export interface StreamMetrics {
  connections: client.Gauge<'transport'>
  opened: client.Counter<'transport'>
  refused: client.Counter<'reason'>
  disconnects: client.Counter<'reason'>
  received: client.Counter
  sent: client.Counter<'kind'>
  buffered: client.Gauge
  bufferedBytes: client.Gauge
  caughtUp: client.Counter<'outcome'>
}

/**
 * The node's metrics, registered on `registry`. prom-client calls collect()
 * with the metric as `this`: the hub's state it reads (its leases and its
 * backfill buffer) is captured here.
 */
export function createStreamMetrics(registry: client.Registry, leases: ReadonlyMap<StreamConnection, Lease>, buffer: RecentBuffer): StreamMetrics {
  const registers = [registry]
  return {
    connections: new client.Gauge({
      name: 'stream_connections',
      help: 'Open activity stream connections on this node',
      labelNames: ['transport'] as const,
      registers,
      collect() {
        const counts = { http: 0, websocket: 0 }
        for (const c of leases.keys()) counts[c.transport]++
        this.set({ transport: 'http' }, counts.http)
        this.set({ transport: 'websocket' }, counts.websocket)
      }
    }),
    opened: new client.Counter({ name: 'stream_connections_opened_total', help: 'Stream connections accepted', labelNames: ['transport'] as const, registers }),
    refused: new client.Counter({ name: 'stream_connections_refused_total', help: 'Stream connections refused (too many connections, shutting down)', labelNames: ['reason'] as const, registers }),
    disconnects: new client.Counter({ name: 'stream_disconnects_total', help: 'Streams ended by the server (SlowReader, ForceDisconnect) or by the client', labelNames: ['reason'] as const, registers }),
    received: new client.Counter({ name: 'stream_deliveries_received_total', help: 'Deliveries consumed from activity.deliveries by this node', registers }),
    sent: new client.Counter({ name: 'stream_lines_sent_total', help: 'Lines written to stream clients', labelNames: ['kind'] as const, registers }),
    buffered: new client.Gauge({
      name: 'stream_backfill_buffer_events',
      help: 'Deliveries held in this node\'s backfill buffer',
      registers,
      collect() {
        this.set(buffer.size())
      }
    }),
    bufferedBytes: new client.Gauge({
      name: 'stream_backfill_buffer_bytes',
      help: 'Bytes held in this node\'s backfill buffer (bounded by STREAM_BACKFILL_MAX_BYTES)',
      registers,
      collect() {
        this.set(buffer.bytes())
      }
    }),
    caughtUp: new client.Counter({
      name: 'stream_deliveries_caught_up_total',
      help: 'Deliveries published while this node was down, read after its restart: buffered for backfill, or dropped as older than the window',
      labelNames: ['outcome'] as const,
      registers
    })
  }
}
