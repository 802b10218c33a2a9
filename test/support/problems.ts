/**
 * The error bodies tests read: the v2 Problem, the classic v1.1 error list,
 * and the ads interface's error list.
 */

/** A v2 Problem (application/problem+json); which fields are present depends on its type. */
export interface Problem {
  type: string
  title: string
  detail: string
  status: number
  errors?: Array<{ message: string; parameters: Record<string, string[]> }>
  parameter?: string
  resource_type?: string
  resource_id?: string
}

/** The message of a response's first error ('' when it has none). */
export function firstMessage(res: { json: <T>() => T }): string {
  return res.json<{ errors?: Array<{ message: string }> }>().errors?.[0]?.message ?? ''
}

/** The single classic (v1.1) error of a response body. */
export function classic(res: { json: <T>() => T }): { code: number; message: string } {
  const body = res.json<{ errors: Array<{ code: number; message: string }> }>()
  return body.errors[0] as { code: number; message: string }
}

/** One error of the ads interface's error list. */
export type AdsErrorItem = { code: string; message: string; parameter?: string }

/** The ads interface's error body. */
export interface AdsErrorBody {
  errors: AdsErrorItem[]
  request: { params: Record<string, unknown> }
}

/** The first error of an ads error body. */
export function adsErrorOf(res: { json: <T>() => T }): AdsErrorItem {
  return (res.json<{ errors?: AdsErrorItem[] }>().errors ?? [])[0] as AdsErrorItem
}
