/** The statistics every bench reports. */

/** The `p`th percentile (0-100) of ascending `sorted` (nearest rank); NaN when there is none. */
export function percentile(sorted: Float64Array | number[], p: number): number {
  return sorted.length === 0 ? Number.NaN : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number)
}
