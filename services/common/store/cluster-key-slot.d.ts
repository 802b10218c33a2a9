// Types of the cluster-key-slot package (Redis Cluster's CRC16 key slot, as ioredis computes it).
declare module 'cluster-key-slot' {
  /** The hash slot (0-16383) of a key, honouring its {hash tag}. */
  function calculateSlot(key: string | Buffer): number
  export = calculateSlot
}
