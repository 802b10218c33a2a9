/**
 * Kafka's default partitioner (murmur2 of the key, positive, modulo the
 * partition count), so the memory bus places keys exactly as Kafka does.
 */
export function murmur2(data: Buffer): number {
  const seed = 0x9747b28c
  const m = 0x5bd1e995
  const r = 24
  const length = data.length
  let h = seed ^ length
  const length4 = length >> 2
  for (let i = 0; i < length4; i++) {
    const i4 = i * 4
    let k = (data[i4]! & 0xff) + ((data[i4 + 1]! & 0xff) << 8) + ((data[i4 + 2]! & 0xff) << 16) + ((data[i4 + 3]! & 0xff) << 24)
    k = Math.imul(k, m)
    k ^= k >>> r
    k = Math.imul(k, m)
    h = Math.imul(h, m)
    h ^= k
  }
  const tail = length & ~3
  const rest = length % 4
  if (rest === 3) h ^= (data[tail + 2]! & 0xff) << 16
  if (rest >= 2) h ^= (data[tail + 1]! & 0xff) << 8
  if (rest >= 1) {
    h ^= data[tail]! & 0xff
    h = Math.imul(h, m)
  }
  h ^= h >>> 13
  h = Math.imul(h, m)
  h ^= h >>> 15
  return h
}

export function partitionFor(key: string, partitions: number): number {
  return (murmur2(Buffer.from(key)) & 0x7fffffff) % partitions
}

/**
 * `first` plus as many keys from `newKey` as it takes for the keys to land on
 * every one of `partitions` (and at least `atLeast` keys in all): load keyed
 * by them reaches every consumer of a group, whichever partitions it owns
 * (fault tests and benchmarks).
 */
export function keysCoveringPartitions(first: string, atLeast: number, partitions: number, newKey: () => string): string[] {
  const keys = [first]
  const covered = new Set([partitionFor(first, partitions)])
  while (covered.size < partitions || keys.length < atLeast) {
    const key = newKey()
    const partition = partitionFor(key, partitions)
    if (covered.has(partition) && keys.length >= atLeast) continue
    covered.add(partition)
    keys.push(key)
  }
  return keys
}
