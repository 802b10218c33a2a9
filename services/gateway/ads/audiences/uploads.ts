import { Ads } from '../../../common/errors'
import { formatIsoTime, parseIsoTime } from '../conventions'
import type { MembershipOperation } from './membership'

/**
 * Validation of the batch upload bodies (custom-audience users and
 * do-not-reach list users, docs/contract.md "Audiences"):
 *
 *  - request level (answered under `errors`): the body is a JSON array of
 *    1..2500 operation objects;
 *  - item level (answered under `operation_errors`, one entry per input
 *    operation, in input order): operation_type Update/Delete, params.users,
 *    identifier arrays, SHA-256 hex values (except partner_user_id), times.
 *
 * Nothing is applied when any operation has an error (all or nothing).
 */

export const MAX_OPERATIONS = 2500
export const MAX_UPLOAD_BODY_BYTES = 5_000_000
export const HASHED = /^[a-f0-9]{64}$/
const MAX_PARTNER_ID = 1024

export interface OperationError {
  code: 'INVALID_PARAMETER' | 'MISSING_PARAMETER'
  message: string
  parameter: string
}

export interface UploadPlan {
  operations: MembershipOperation[]
  /** Per operation, its params as echoed in a batch response (users omitted). */
  echo: Array<{ operation_type: string; params: Record<string, unknown> }>
  /** User objects per operation. */
  counts: number[]
}

export type UploadValidation = { ok: true; plan: UploadPlan } | { ok: false; operationErrors: OperationError[][] }

export interface UploadRules {
  /**
   * Identifier keys accepted in a user object, with their stored type name.
   * A Map, not an object literal: a user-sent key such as "constructor" or
   * "__proto__" must not resolve to an inherited member.
   */
  keys: ReadonlyMap<string, string>
  /** Keys whose values are sent in plain text (not hashed). */
  plainKeys: string[]
  acceptsEffectiveAt: boolean
  /** Latest accepted expires_at, relative to now (do-not-reach lists: 13 months). */
  maxExpiresAt?: (now: number) => number
}

export const CUSTOM_AUDIENCE_RULES: UploadRules = {
  keys: new Map([
    ['email', 'email'],
    ['device_id', 'device_id'],
    ['handle', 'handle'],
    ['svc_id', 'svc_id'],
    ['twitter_id', 'svc_id'],
    ['phone_number', 'phone_number'],
    ['partner_user_id', 'partner_user_id']
  ]),
  plainKeys: ['partner_user_id'],
  acceptsEffectiveAt: true
}

export const DO_NOT_REACH_RULES: UploadRules = {
  keys: new Map([
    ['email', 'email'],
    ['phone_number', 'phone_number']
  ]),
  plainKeys: [],
  acceptsEffectiveAt: false,
  maxExpiresAt: (now) => addMonths(now, 13) + 60_000
}

/** `months` calendar months after `ms` (UTC), the day clamped to the month's length. */
export function addMonths(ms: number, months: number): number {
  const d = new Date(ms)
  const target = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + months, 1, d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds(), d.getUTCMilliseconds()))
  const lastDay = new Date(Date.UTC(target.getUTCFullYear(), target.getUTCMonth() + 1, 0)).getUTCDate()
  target.setUTCDate(Math.min(d.getUTCDate(), lastDay))
  return target.getTime()
}

/** A UTC ISO 8601 time (Z, ±00:00 or no zone); impossible dates such as 2030-02-31 are refused. */
function parseUtc(value: unknown): number | undefined {
  return parseIsoTime(value, { utcOnly: true })
}

/** The request-level checks: a JSON array of 1..2500 operations. */
export function checkBatchShape(body: unknown): unknown[] {
  if (!Array.isArray(body)) throw Ads.invalid('body', 'The body must be a JSON array of operation objects')
  if (body.length === 0) throw Ads.invalid('body', 'The batch holds no operation')
  if (body.length > MAX_OPERATIONS) throw Ads.invalid('body', `Batch size exceeded: at most ${MAX_OPERATIONS} operations per request, got ${body.length}`)
  return body
}

export function validateUpload(body: unknown[], rules: UploadRules, now = Date.now()): UploadValidation {
  const errors: OperationError[][] = []
  const plan: UploadPlan = { operations: [], echo: [], counts: [] }
  const defaultExpiry = addMonths(now, 13)

  for (const [i, raw] of body.entries()) {
    const errs: OperationError[] = []
    errors.push(errs)
    const invalid = (parameter: string, message: string): void => {
      errs.push({ code: 'INVALID_PARAMETER', message, parameter })
    }
    const missing = (parameter: string): void => {
      errs.push({ code: 'MISSING_PARAMETER', message: `"${parameter}" is missing`, parameter })
    }
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
      invalid('operation', `Operation ${i} must be an object with operation_type and params`)
      continue
    }
    const op = raw as Record<string, unknown>
    for (const key of Object.keys(op)) if (key !== 'operation_type' && key !== 'params') invalid(key, `Unknown attribute "${key}" in the operation`)
    const type = op.operation_type
    if (type === undefined || type === null || type === '') missing('operation_type')
    else if (type !== 'Update' && type !== 'Delete') invalid('operation_type', `Expected one of Update, Delete, got ${JSON.stringify(type)} for operation_type`)

    const params = op.params
    if (params === undefined || params === null) {
      missing('params')
      continue
    }
    if (typeof params !== 'object' || Array.isArray(params)) {
      invalid('params', 'params must be an object holding users')
      continue
    }
    const p = params as Record<string, unknown>
    for (const key of Object.keys(p)) {
      if (key === 'users' || key === 'expires_at' || (key === 'effective_at' && rules.acceptsEffectiveAt)) continue
      if (key === 'effective_at') invalid('params.effective_at', 'effective_at is not accepted here: entries take effect at the time of the request')
      else invalid(`params.${key}`, `Unknown attribute "${key}" in params`)
    }

    let effectiveAt = now
    if (rules.acceptsEffectiveAt && p.effective_at !== undefined && p.effective_at !== null) {
      const ms = parseUtc(p.effective_at)
      if (ms === undefined) invalid('params.effective_at', `Expected UTC time in ISO 8601 format, got ${JSON.stringify(p.effective_at)} for effective_at`)
      else effectiveAt = ms
    }
    let expiresAt = defaultExpiry
    if (p.expires_at !== undefined && p.expires_at !== null) {
      const ms = parseUtc(p.expires_at)
      if (ms === undefined) invalid('params.expires_at', `Expected UTC time in ISO 8601 format, got ${JSON.stringify(p.expires_at)} for expires_at`)
      else expiresAt = ms
    }
    if (expiresAt <= effectiveAt && !errs.some((e) => e.parameter.endsWith('_at'))) {
      invalid('params.expires_at', rules.acceptsEffectiveAt ? 'expires_at must be later than effective_at' : 'expires_at must be later than the time of the request')
    }
    if (rules.maxExpiresAt && expiresAt > rules.maxExpiresAt(now)) invalid('params.expires_at', 'expires_at must be less than 13 months after the time of the request')

    const users = p.users
    const identities: string[][] = []
    if (users === undefined || users === null) missing('params.users')
    else if (!Array.isArray(users)) invalid('params.users', 'users must be an array of user objects')
    else if (users.length === 0) invalid('params.users', 'users must hold at least one user object')
    else {
      for (const [u, user] of users.entries()) {
        const at = `params.users[${u}]`
        if (user === null || typeof user !== 'object' || Array.isArray(user)) {
          invalid(at, `${at} must be an object of identifier arrays`)
          continue
        }
        const ids: string[] = []
        for (const [key, values] of Object.entries(user as Record<string, unknown>)) {
          const type = rules.keys.get(key)
          if (type === undefined) {
            invalid(`${at}.${key}`, `Unknown user identifier "${key}"; accepted: ${[...rules.keys.keys()].join(', ')}`)
            continue
          }
          if (!Array.isArray(values) || values.length === 0) {
            invalid(`${at}.${key}`, `${key} must be a non-empty array of strings`)
            continue
          }
          for (const [v, value] of values.entries()) {
            const where = `${at}.${key}[${v}]`
            if (typeof value !== 'string' || value === '') invalid(where, `${where} must be a non-empty string`)
            else if (rules.plainKeys.includes(key)) {
              if (value.length > MAX_PARTNER_ID) invalid(where, `${where} must be at most ${MAX_PARTNER_ID} characters`)
              else ids.push(`${type}:${value}`)
            } else if (!HASHED.test(value)) invalid(where, `${where} must be the SHA-256 of the normalized value as 64 lowercase hex characters`)
            else ids.push(`${type}:${value}`)
          }
        }
        if (Object.keys(user as object).length === 0) invalid(at, `${at} holds no identifier`)
        identities.push([...new Set(ids)])
      }
    }
    if (errs.length > 0) continue
    plan.operations.push({ type: type as 'Update' | 'Delete', users: identities, effectiveAt, expiresAt })
    const echo: Record<string, unknown> = { expires_at: formatIsoTime(expiresAt) }
    if (rules.acceptsEffectiveAt) echo.effective_at = formatIsoTime(effectiveAt)
    plan.echo.push({ operation_type: type as string, params: echo })
    plan.counts.push(identities.length)
  }
  if (errors.some((e) => e.length > 0)) return { ok: false, operationErrors: errors }
  return { ok: true, plan }
}
