/**
 * The time creatives read for time-driven state (a poll closes at its
 * end_time). One indirection so tests can move time forward instead of
 * waiting out the five-minute minimum poll duration.
 */
export const clock = {
  now: (): number => Date.now()
}

/** Sets the creatives clock; returns a function that restores the previous one. */
export function setClock(now: () => number): () => void {
  const previous = clock.now
  clock.now = now
  return () => {
    clock.now = previous
  }
}

export function isoSeconds(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z')
}
