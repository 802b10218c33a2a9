import fs from 'node:fs'
import { loadConfig } from '../common/config'
import { operatorTokenFile } from '../common/operator'

/**
 * HTTP client of the operator API. GATEWAY_URL (default http://127.0.0.1:PORT)
 * and OPERATOR_TOKEN (default: the embedded runtime's DATA_DIR/operator-token).
 */
export interface OperatorClient {
  baseUrl: string
  call<T = unknown>(method: string, path: string, body?: unknown): Promise<T>
}

export class OperatorApiError extends Error {
  constructor(readonly status: number, readonly body: string) {
    super(`operator API answered ${status}: ${body}`)
  }
}

export function operatorClient(env: NodeJS.ProcessEnv = process.env): OperatorClient {
  const config = loadConfig(env)
  const baseUrl = (env.GATEWAY_URL ?? `http://127.0.0.1:${config.port}`).replace(/\/+$/, '')
  let token = config.operatorToken
  if (token === '' && fs.existsSync(operatorTokenFile(config))) token = fs.readFileSync(operatorTokenFile(config), 'utf8').trim()
  return {
    baseUrl,
    async call<T>(method: string, path: string, body?: unknown): Promise<T> {
      const headers: Record<string, string> = { authorization: `Bearer ${token}` }
      if (body !== undefined) headers['content-type'] = 'application/json'
      let res: Response
      try {
        res = await fetch(`${baseUrl}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
      } catch (err) {
        throw new Error(`cannot reach the gateway at ${baseUrl} (is it running? set GATEWAY_URL): ${(err as Error).message}`, { cause: err })
      }
      const text = await res.text()
      if (!res.ok) throw new OperatorApiError(res.status, text)
      return (text === '' ? undefined : JSON.parse(text)) as T
    }
  }
}
