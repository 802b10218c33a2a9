import dns from 'node:dns'
import net, { type LookupFunction } from 'node:net'
import { buildConnector } from 'undici'

/**
 * Webhook URLs point the service at hosts chosen by its clients, so every
 * request it makes is a potential SSRF. The rules (docs/webhooks.md):
 * https only, no explicit port, and a host whose every address is public.
 *
 * The address check runs twice: at registration (a clear error for the
 * client) and again at every connection, inside the socket's own DNS lookup,
 * so the address that was checked is the address connected to. A name that
 * resolved to a public address at registration and to 127.0.0.1 later
 * (DNS rebinding) is refused at connect time.
 *
 * WEBHOOK_ALLOW_INSECURE=true (development and tests only) lifts the scheme,
 * port and address rules so receivers on loopback work.
 */

export class UnsafeUrlError extends Error {
  readonly code = 'WEBHOOK_UNSAFE_URL'
  constructor(message: string) {
    super(message)
    this.name = 'UnsafeUrlError'
  }
}

export interface ResolvedAddress {
  address: string
  family: number
}

/** Resolves a host name to every address it has (dns.lookup by default; tests inject their own). */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>

export const systemResolver: Resolver = (hostname) => dns.promises.lookup(hostname, { all: true, verbatim: true })

export interface UrlPolicy {
  allowInsecure: boolean
  resolve?: Resolver
}

// IPv4 ranges that are not publicly routable (RFC 6890 special-purpose registry and friends).
const V4_BLOCKED: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata (169.254.169.254)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // TEST-NET-1
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // TEST-NET-2
  ['203.0.113.0', 24], // TEST-NET-3
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4] // reserved, broadcast
]

// IPv6: only global unicast (2000::/3) is public, minus the special ranges inside it.
const V6_GLOBAL: Array<[string, number]> = [['2000::', 3]]
const V6_BLOCKED_IN_GLOBAL: Array<[string, number]> = [
  ['2001::', 23], // IETF protocol assignments (Teredo, ORCHID, benchmarking...)
  ['2001:db8::', 32], // documentation
  ['2002::', 16] // 6to4: embeds an arbitrary IPv4 address
]

function blockList(ranges: Array<[string, number]>, family: 'ipv4' | 'ipv6'): net.BlockList {
  const list = new net.BlockList()
  for (const [network, prefix] of ranges) list.addSubnet(network, prefix, family)
  return list
}

const v4Blocked = blockList(V4_BLOCKED, 'ipv4')
const v6Global = blockList(V6_GLOBAL, 'ipv6')
const v6Blocked = blockList(V6_BLOCKED_IN_GLOBAL, 'ipv6')

/** Whether `address` (an IP literal, brackets and zone allowed) is a public unicast address. */
export function isPublicAddress(address: string): boolean {
  const bare = stripBrackets(address).replace(/%.*$/, '')
  const family = net.isIP(bare)
  if (family === 4) return !v4Blocked.check(bare, 'ipv4')
  if (family === 6) {
    // IPv4-mapped (::ffff:a.b.c.d): BlockList checks the embedded IPv4 address against the IPv4 rules.
    if (/^::ffff:[^:]+(:[^:]+)?$/i.test(bare)) return !v4Blocked.check(bare, 'ipv6')
    return v6Global.check(bare, 'ipv6') && !v6Blocked.check(bare, 'ipv6')
  }
  return false
}

function stripBrackets(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host
}

/**
 * The input as the WHATWG parser reads it: leading and trailing C0 controls
 * and spaces stripped, ASCII tab and newline removed everywhere. The port
 * check must look at these characters, not at the raw string, or forms the
 * parser tolerates (" https://host:8443", "https://host:4\t43") slip past.
 */
function asParserReadsIt(raw: string): string {
  // eslint-disable-next-line no-control-regex
  return raw.replace(/^[\u0000-\u0020]+|[\u0000-\u0020]+$/g, '').replace(/[\t\n\r]/g, '')
}

/**
 * The authority of an http(s) URL as written, before WHATWG normalisation
 * drops a default port. For these (special) schemes the parser accepts any
 * run of `/` and `\` after the scheme, or none at all (`https:host:8443`),
 * and `\` ends the authority like `/`.
 */
function writtenAuthority(raw: string): string {
  const m = /^[a-zA-Z][a-zA-Z0-9+.-]*:[/\\]*([^/\\?#]*)/.exec(asParserReadsIt(raw))
  return m?.[1] ?? ''
}

/** Whether the URL names a port, explicitly or through the authority as written (even an empty or default one). */
function hasExplicitPort(raw: string, url: URL): boolean {
  if (url.port !== '') return true
  // The user info ends at the last `@` (the parser percent-encodes earlier ones).
  const hostPort = writtenAuthority(raw).replace(/^.*@/, '')
  if (hostPort.startsWith('[')) return /\]:/.test(hostPort)
  return hostPort.includes(':')
}

/**
 * Syntactic rules: absolute http(s) URL, no credentials, and (unless
 * insecure) https without an explicit port. Returns the parsed URL without
 * its fragment: callers store and use its `href`, never the raw input.
 */
export function parseWebhookUrl(raw: string, allowInsecure: boolean): URL {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new UnsafeUrlError('The url is not a valid absolute URL.')
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new UnsafeUrlError('The url must use https.')
  if (!allowInsecure && url.protocol !== 'https:') throw new UnsafeUrlError('The url must use https.')
  if (url.username !== '' || url.password !== '') throw new UnsafeUrlError('The url must not contain credentials.')
  if (url.hostname === '') throw new UnsafeUrlError('The url has no host.')
  if (!allowInsecure && hasExplicitPort(raw, url)) throw new UnsafeUrlError('The url must not specify a port.')
  // The fragment never reaches the receiver, and two URLs that differ only in it are the same endpoint.
  url.hash = ''
  return url
}

/** Every address of `hostname` (a literal is its own single address). */
async function addressesOf(hostname: string, resolve: Resolver): Promise<ResolvedAddress[]> {
  const bare = stripBrackets(hostname)
  const family = net.isIP(bare)
  if (family !== 0) return [{ address: bare, family }]
  try {
    const found = await resolve(bare)
    if (found.length === 0) throw new UnsafeUrlError(`The host ${bare} does not resolve.`)
    return found
  } catch (err) {
    if (err instanceof UnsafeUrlError) throw err
    throw new UnsafeUrlError(`The host ${bare} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'lookup failed'}).`)
  }
}

function assertAllPublic(hostname: string, addresses: ResolvedAddress[]): void {
  const bad = addresses.find((a) => !isPublicAddress(a.address))
  if (bad) {
    const shown = stripBrackets(hostname) === bad.address ? bad.address : `${stripBrackets(hostname)} (${bad.address})`
    throw new UnsafeUrlError(`The url must be publicly reachable; ${shown} is not a public address.`)
  }
}

/** Registration check: syntax, then every resolved address public (unless insecure). */
export async function checkWebhookUrl(raw: string, policy: UrlPolicy): Promise<URL> {
  const url = parseWebhookUrl(raw, policy.allowInsecure)
  if (policy.allowInsecure) return url
  const addresses = await addressesOf(url.hostname, policy.resolve ?? systemResolver)
  assertAllPublic(url.hostname, addresses)
  return url
}

/**
 * A socket `lookup` that resolves, refuses when any address is not public,
 * and hands the socket exactly the checked addresses.
 */
export function guardedLookup(resolve: Resolver = systemResolver): LookupFunction {
  return (hostname, options, callback) => {
    addressesOf(hostname, resolve).then(
      (addresses) => {
        try {
          assertAllPublic(hostname, addresses)
        } catch (err) {
          callback(err as NodeJS.ErrnoException, '', 0)
          return
        }
        const wanted = options.family === 4 || options.family === 6 ? addresses.filter((a) => a.family === options.family) : addresses
        if (wanted.length === 0) {
          const err = Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' }) as NodeJS.ErrnoException
          callback(err, '', 0)
          return
        }
        if (options.all) {
          ;(callback as unknown as (err: null, addresses: ResolvedAddress[]) => void)(null, wanted)
        } else {
          const first = wanted[0] as ResolvedAddress
          callback(null, first.address, first.family)
        }
      },
      (err: NodeJS.ErrnoException) => callback(err, '', 0)
    )
  }
}

/**
 * The undici connector every webhook request goes through. In secure mode an
 * IP-literal host is checked here (sockets skip lookup for literals) and a
 * host name through `guardedLookup`.
 */
export function guardedConnector(policy: UrlPolicy, connectTimeoutMs: number): buildConnector.connector {
  if (policy.allowInsecure) return buildConnector({ timeout: connectTimeoutMs })
  const base = buildConnector({ timeout: connectTimeoutMs, lookup: guardedLookup(policy.resolve) })
  return (options, callback) => {
    const host = stripBrackets(options.hostname)
    if (net.isIP(host) !== 0 && !isPublicAddress(host)) {
      callback(new UnsafeUrlError(`The url must be publicly reachable; ${host} is not a public address.`), null)
      return
    }
    base(options, callback)
  }
}
