import { type ListExtras, type ListOptions, type Page, paginate } from '../conventions'

/** Small list helpers shared by the campaign-management list operations. */

/** Keeps the items whose id is in `ids` (when given), then paginates. */
export function filterByIds<T extends { id: string }>(items: T[], ids: string[] | undefined, opts: ListOptions): Page<T> {
  const wanted = ids === undefined ? undefined : new Set(ids)
  return paginate(wanted === undefined ? items : items.filter((i) => wanted.has(i.id)), opts)
}

/** `q`: case-insensitive prefix match on `name` (docs/ads.md). */
export function matchesNamePrefix(name: string | null | undefined, q: string | undefined): boolean {
  if (q === undefined) return true
  return (name ?? '').toLowerCase().startsWith(q.toLowerCase())
}

export function pageExtras<T>(page: Page<T>): ListExtras {
  return { next_cursor: page.next_cursor, ...(page.total_count !== undefined ? { total_count: page.total_count } : {}) }
}
