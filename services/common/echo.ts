/**
 * Bounded echoes of client input in error bodies. An error names the value
 * it refused, but never grows with it: a 0.7 MB body once came back as a
 * 5 MB error. Every interface's error rendering echoes through here.
 */

/** Longest echo of an input value; longer ones end with `…`. */
export const ECHO_MAX_CHARS = 256
/** Nesting shown in an echo; deeper arrays and objects appear as `[…]` / `{…}`. */
const ECHO_MAX_DEPTH = 8

export function capText(text: string, maxChars: number): string {
  return text.length > maxChars ? `${text.slice(0, maxChars)}…` : text
}

/**
 * Control characters JSON writes as six-byte `\u00XX` escapes. Tab, line feed
 * and carriage return (two-byte escapes, and what a client most often sends
 * by mistake, as around a pasted URL) are echoed as they are.
 */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g

/**
 * Text of an error message, bounded, its control characters shown as `?`:
 * an echo then costs no more bytes in the answer than the input it quotes
 * cost in the request (a `%01` in a form is 3 bytes, its JSON escape 6).
 */
export function messageText(text: string, maxChars: number): string {
  return capText(text, maxChars).replace(CONTROL, '?')
}

/**
 * A value as an error echoes it: strings as they are, anything else in a
 * JSON-like form. Bounded in length and depth, so a huge or deeply nested
 * value (String() of a 5000-deep array overflows the stack) still gets its
 * 400, never a 500. The walk stops as soon as the budget is spent, whatever
 * the size of the value.
 */
export function echoValue(value: unknown, maxChars = ECHO_MAX_CHARS): string {
  if (typeof value === 'string') return messageText(value, maxChars)
  const parts: string[] = []
  let used = 0
  /** Appends `text`; false once the budget is spent (the walk then stops). */
  const emit = (text: string): boolean => {
    parts.push(text)
    used += text.length
    return used < maxChars
  }
  const walk = (v: unknown, depth: number): boolean => {
    if (typeof v === 'string') return emit(JSON.stringify(capText(v, maxChars)))
    if (v === null || typeof v !== 'object') return emit(String(v))
    if (depth >= ECHO_MAX_DEPTH) return emit(Array.isArray(v) ? '[…]' : '{…}')
    if (Array.isArray(v)) {
      if (!emit('[')) return false
      for (let i = 0; i < v.length; i++) if ((i > 0 && !emit(',')) || !walk(v[i], depth + 1)) return false
      return emit(']')
    }
    if (!emit('{')) return false
    let first = true
    for (const key in v) {
      if (!Object.hasOwn(v, key)) continue
      if ((!first && !emit(',')) || !emit(`${JSON.stringify(capText(key, maxChars))}:`) || !walk((v as Record<string, unknown>)[key], depth + 1)) return false
      first = false
    }
    return emit('}')
  }
  walk(value, 0)
  return messageText(parts.join(''), maxChars)
}
