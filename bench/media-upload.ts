/**
 * bench/media-upload: server memory while a 500 MB video is uploaded in
 * 5 MB segments through the v2 chunked upload (initialize, 100 multipart
 * appends, finalize, STATUS until the video is processed), against the same
 * steps for a 10 MB video in the same server process (the baseline), with
 * the processing_info states STATUS reported on the way. The
 * gateway runs as its own process (dist/services/embedded/main.js); its peak
 * RSS is read from /proc (VmHWM, reset through clear_refs before each
 * upload; VmRSS sampled every 50 ms where the reset is not allowed). The
 * video is a 5 s H.264 clip of ffmpeg's testsrc2, concatenated by stream copy
 * to ~500 MB in a temp dir. Target: < 100 MB RSS growth.
 *
 *   make build && node dist/bench/media-upload.js
 *   BENCH_MEDIA_MB=100 for a smaller file.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { AccessToken, App } from '../services/common/auth/records'
import { MemoryStore } from '../services/common/store/memory'
import { createApp, createUser, issueAccessToken } from '../services/gateway/identity'
import { oauthHeader } from './support/oauth1'

const TARGET_MB = Number(process.env.BENCH_MEDIA_MB ?? 500)
const SEGMENT = 5 * 1024 * 1024
const GROWTH_TARGET = 100 * 1024 * 1024
const ROOT = path.resolve(__dirname, '..', ...(__dirname.includes(`${path.sep}dist${path.sep}`) ? ['..'] : []))
const MB = 1024 * 1024

const rows: Array<[string, string, string]> = []
function report(what: string, value: string, baseline: string): void {
  rows.push([what, value, baseline])
  process.stdout.write(`  ${what}: ${value}   (baseline: ${baseline})\n`)
}

function ffmpeg(args: string[]): void {
  execFileSync('ffmpeg', ['-nostdin', '-v', 'error', '-y', ...args], { stdio: 'inherit', timeout: 300_000 })
}

/** A 5 s 1280x720 clip, and the same clip concatenated (stream copy) up to about `mb` MB. */
function makeVideos(dir: string, mb: number): { clip: string; big: string } {
  const clip = path.join(dir, 'clip.mp4')
  ffmpeg(['-f', 'lavfi', '-i', 'testsrc2=size=1280x720:rate=30', '-t', '5', '-pix_fmt', 'yuv420p', '-c:v', 'libx264', '-preset', 'ultrafast', '-qp', '0', clip])
  const copies = Math.max(1, Math.floor((mb * MB) / fs.statSync(clip).size))
  const list = path.join(dir, 'list.txt')
  fs.writeFileSync(list, Array.from({ length: copies }, () => `file '${clip}'\n`).join(''))
  const big = path.join(dir, 'big.mp4')
  ffmpeg(['-f', 'concat', '-safe', '0', '-i', list, '-c', 'copy', big])
  return { clip, big }
}

function status(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const text = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(text)?.[1] ?? 0) * 1024
}

/** Resets the process's peak RSS (VmHWM); false where the kernel refuses. */
function resetPeak(pid: number): boolean {
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5')
    return true
  } catch {
    return false
  }
}

interface Ident {
  app: App
  token: AccessToken
}

function signer(id: Ident): (method: string, url: string) => Record<string, string> {
  return (method, url) => ({ Authorization: oauthHeader(method, url, id.app, id.token) })
}

interface Upload {
  seconds: number
  processingSeconds: number
  states: string[]
  peakGrowth: number
}

async function upload(base: string, id: Ident, pid: number, file: string): Promise<Upload> {
  const sign = signer(id)
  const size = fs.statSync(file).size
  const call = async (method: string, url: string, body?: FormData | string): Promise<Record<string, unknown>> => {
    const headers: Record<string, string> = sign(method, url)
    if (typeof body === 'string') headers['content-type'] = 'application/json'
    const res = await fetch(url, { method, headers, body })
    const text = await res.text()
    if (res.status !== 200) throw new Error(`${method} ${url}: ${res.status} ${text.slice(0, 300)}`)
    return JSON.parse(text) as Record<string, unknown>
  }

  await new Promise((r) => setTimeout(r, 300))
  const exact = resetPeak(pid)
  const before = status(pid, 'VmRSS')
  let sampled = before
  const sampler = setInterval(() => (sampled = Math.max(sampled, status(pid, 'VmRSS'))), 50)
  const t0 = performance.now()
  try {
    const init = await call('POST', `${base}/2/media/upload/initialize`, JSON.stringify({ media_type: 'video/mp4', media_category: 'tweet_video', total_bytes: size }))
    const mediaId = (init.data as { id: string }).id
    const fd = fs.openSync(file, 'r')
    try {
      for (let i = 0, offset = 0; offset < size; i++, offset += SEGMENT) {
        const chunk = Buffer.alloc(Math.min(SEGMENT, size - offset))
        fs.readSync(fd, chunk, 0, chunk.length, offset)
        const form = new FormData()
        form.append('segment_index', String(i))
        form.append('media', new Blob([chunk], { type: 'application/octet-stream' }), 'blob')
        await call('POST', `${base}/2/media/upload/${mediaId}/append`, form)
      }
    } finally {
      fs.closeSync(fd)
    }
    const t1 = performance.now()
    // An eager client: STATUS every 20 ms instead of check_after_secs, to see the progress reported on the way.
    const states: string[] = []
    let answer = await call('POST', `${base}/2/media/upload/${mediaId}/finalize`)
    for (;;) {
      const info = (answer.data as { processing_info?: { state: string; progress_percent?: number; error?: { message: string } } }).processing_info
      if (!info) throw new Error('a video answers with processing_info')
      const seen = `${info.state} ${info.progress_percent ?? 0} %`
      if (states.at(-1) !== seen) states.push(seen)
      if (info.state === 'succeeded') break
      if (info.state === 'failed') throw new Error(`processing failed: ${info.error?.message}`)
      await new Promise((r) => setTimeout(r, 20))
      answer = await call('GET', `${base}/2/media/upload?command=STATUS&media_id=${mediaId}`)
    }
    const t2 = performance.now()
    const peak = exact ? status(pid, 'VmHWM') : sampled
    return { seconds: (t1 - t0) / 1000, processingSeconds: (t2 - t1) / 1000, states, peakGrowth: Math.max(sampled, peak) - before }
  } finally {
    clearInterval(sampler)
  }
}

async function startGateway(dir: string): Promise<{ proc: ChildProcess; baseUrl: string }> {
  const main = path.join(ROOT, 'dist', 'services', 'embedded', 'main.js')
  if (!fs.existsSync(main)) throw new Error(`${main} is missing: run make build first`)
  const env = { ...process.env, DATA_DIR: dir, PORT: '0', SANDBOX_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', KAFKA_BROKERS: '', REDIS_URL: '', RATE_LIMIT_DEFAULT: '10000000' }
  const proc = spawn(process.execPath, [main], { env, stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  const baseUrl = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start: ${out}`)), 30_000)
    proc.stdout?.on('data', (d: Buffer) => {
      out += d.toString()
      const m = /\{base_url\} and \{ads_url\}: (http:\/\/\S+)/.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve(m[1] as string)
      }
    })
    proc.once('exit', (code) => reject(new Error(`gateway exited ${code}: ${out}`)))
  })
  return { proc, baseUrl }
}

async function main(): Promise<void> {
  process.stdout.write(`bench/media-upload on ${os.cpus().length} cpu(s), node ${process.version}\n`)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-media-'))
  const gw = { proc: undefined as ChildProcess | undefined }
  try {
    const { clip, big } = makeVideos(dir, TARGET_MB)
    const seed = await MemoryStore.open(path.join(dir, 'state'))
    const app = await createApp(seed, { name: 'bench', access_level: 'read-write', callback_urls: ['http://127.0.0.1/cb'] })
    const user = await createUser(seed, 'bench_uploader', 'a long bench password')
    const id = { app, token: await issueAccessToken(seed, app, user) }
    await seed.close()
    const started = await startGateway(dir)
    gw.proc = started.proc
    const pid = started.proc.pid as number
    process.stdout.write(`  gateway RSS at rest: ${(status(pid, 'VmRSS') / MB).toFixed(1)} MB; peak reset ${resetPeak(pid) ? 'through clear_refs' : 'refused: VmRSS sampled'}\n`)

    const small = await upload(started.baseUrl, id, pid, clip)
    const large = await upload(started.baseUrl, id, pid, big)
    const bigMb = fs.statSync(big).size / MB
    const clipMb = fs.statSync(clip).size / MB
    const segments = Math.ceil(fs.statSync(big).size / SEGMENT)
    report(`server RSS growth, ${bigMb.toFixed(0)} MB video in ${segments} segments of 5 MB`, `${(large.peakGrowth / MB).toFixed(1)} MB (target < 100 MB)`, `${clipMb.toFixed(0)} MB video: ${(small.peakGrowth / MB).toFixed(1)} MB`)
    report('appends (initialize + segments)', `${large.seconds.toFixed(1)} s, ${(bigMb / large.seconds).toFixed(0)} MB/s`, `${small.seconds.toFixed(2)} s, ${(clipMb / small.seconds).toFixed(0)} MB/s`)
    report('FINALIZE to succeeded (join, ffprobe, poster)', `${large.processingSeconds.toFixed(1)} s`, `${small.processingSeconds.toFixed(1)} s`)
    report('processing_info seen', large.states.join(' -> '), small.states.join(' -> '))
    process.stdout.write('\n| measurement | result | baseline (same run) |\n|---|---|---|\n')
    for (const [what, value, baseline] of rows) process.stdout.write(`| ${what} | ${value} | ${baseline} |\n`)
    if (large.peakGrowth >= GROWTH_TARGET) {
      process.stdout.write(`RSS growth ${(large.peakGrowth / MB).toFixed(1)} MB is over the 100 MB target\n`)
      process.exitCode = 1
    }
  } finally {
    if (gw.proc && gw.proc.exitCode === null) {
      const exited = new Promise((r) => gw.proc?.once('exit', r))
      gw.proc.kill('SIGTERM')
      await exited
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
