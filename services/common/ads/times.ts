/**
 * Times of the advertising interface: the one ISO 8601 parser every ads
 * parameter goes through, and the form times are returned and echoed in.
 */

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})?)?$/

export interface TimeRules {
  /** The time of day is required (a bare date is refused). */
  requireTime?: boolean
  /** An explicit zone (`Z` or an offset) is required. */
  requireZone?: boolean
  /** Only UTC is accepted: `Z`, `+00:00`, `-00:00` or no zone. */
  utcOnly?: boolean
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31
}

function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0
}

/** Minutes east of UTC of a zone designator, or undefined when out of range. */
function zoneOffsetMinutes(zone: string | undefined): number | undefined {
  if (zone === undefined || zone === 'Z') return 0
  const m = /^([+-])(\d{2}):?(\d{2})$/.exec(zone)
  if (!m) return undefined
  const hours = Number(m[2])
  const minutes = Number(m[3])
  if (hours > 23 || minutes > 59) return undefined
  return (m[1] === '-' ? -1 : 1) * (hours * 60 + minutes)
}

/**
 * The one ISO 8601 parser of the ads interface: `YYYY-MM-DD`, optionally
 * `THH:MM[:SS[.fraction]]` and a zone (`Z`, `±HH:MM`, `±HHMM`; none means
 * UTC). Returns epoch milliseconds, or undefined for anything malformed or
 * impossible. Unlike Date.parse it never rolls over: 2030-02-31, 24:00 or
 * 12:60 are refused, not turned into another instant.
 */
export function parseIsoTime(raw: unknown, rules: TimeRules = {}): number | undefined {
  if (typeof raw !== 'string') return undefined
  const m = ISO_TIME.exec(raw)
  if (!m) return undefined
  const [, y, mo, d, h, mi, sec, fraction, zone] = m as unknown as [string, string, string, string, string | undefined, string | undefined, string | undefined, string | undefined, string | undefined]
  if (h === undefined && rules.requireTime) return undefined
  if (zone === undefined && rules.requireZone) return undefined
  const offset = zoneOffsetMinutes(zone)
  if (offset === undefined || (rules.utcOnly && offset !== 0)) return undefined
  const year = Number(y)
  const month = Number(mo)
  const day = Number(d)
  const hour = Number(h ?? 0)
  const minute = Number(mi ?? 0)
  const second = Number(sec ?? 0)
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined
  if (hour > 23 || minute > 59 || second > 59) return undefined
  const date = new Date(0)
  // setUTCFullYear, unlike Date.UTC, keeps years 0000-0099 as written.
  date.setUTCFullYear(year, month - 1, day)
  date.setUTCHours(hour, minute, second, Number((fraction ?? '0').padEnd(3, '0').slice(0, 3)))
  return date.getTime() - offset * 60_000
}

/** A time as the ads interface returns and echoes it: UTC, `Z`, milliseconds only when not zero. */
export function formatIsoTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.000Z$/, 'Z')
}
