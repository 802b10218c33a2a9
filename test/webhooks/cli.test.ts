import { WebhookKeys } from '../../services/webhooks/keys'
import t from 'tap'
import { type CliIo, run } from '../../services/cli/webhooks'
import { formatReplayDate } from '../../services/webhooks/replay'
import { collectDeadLetters, deliveryMessage, FAST_ENV, publishDeliveries, registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { eventually } from '../support/util'

function capture(env: Record<string, string>): CliIo & { lines: string[]; errors: string[] } {
  const lines: string[] = []
  const errors: string[] = []
  return { env, out: (l) => lines.push(l), err: (l) => errors.push(l), lines, errors }
}

t.test('the webhooks CLI lists, inspects, re-sends and replays through the operator API', async (t) => {
  const rt = await startWebhooks(t)
  const env = { GATEWAY_URL: rt.baseUrl, OPERATOR_TOKEN: FAST_ENV.OPERATOR_TOKEN as string }
  const deadLetters = await collectDeadLetters(t, rt)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)

  const list = capture(env)
  t.equal(await run(['list'], list), 0)
  t.match(list.lines.join('\n'), new RegExp(`${webhookId}\\s+${id.app.id}\\s+yes\\s+0\\s+\\S+\\s+${receiver.url.replace(/[.?]/g, '\\$&')}`))

  receiver.onPost = () => ({ status: 500 })
  // Five minutes old, so that a replay window ending at the current minute (exclusive) holds it.
  const message = deliveryMessage({ appId: id.app.id, webhookId, createdAt: new Date(Date.now() - 5 * 60_000).toISOString() })
  await publishDeliveries(rt, [message])
  await eventually(() => deadLetters.length === 1, 10_000)
  // The dead letter is published before the record turns failed (a crash between re-publishes rather than loses it).
  await eventually(async () => (await rt.ctx.store.getJson<{ status: string }>(WebhookKeys.delivery(String(message.delivery_id))))?.status === 'failed', 5000)

  const failed = capture(env)
  t.equal(await run(['deliveries', '--webhook', webhookId, '--status', 'failed'], failed), 0)
  t.match(failed.lines.join('\n'), new RegExp(`${String(message.delivery_id)}\\s+failed\\s+3\\s+500`))
  t.match(failed.lines.at(-1), /^1 delivery$/)
  const asJson = capture(env)
  t.equal(await run(['deliveries', '--webhook', webhookId, '--json'], asJson), 0)
  t.match(JSON.parse(asJson.lines.join('\n')), [{ delivery_id: message.delivery_id, status: 'failed', attempts: 3 }])

  receiver.onPost = () => ({ status: 200 })
  const resend = capture(env)
  t.equal(await run(['resend', '--webhook', webhookId, '--since', new Date(Date.now() - 3_600_000).toISOString()], resend), 0)
  t.match(resend.lines[0], /^re-sent 1 failed delivery of webhook \d+ since /)
  await eventually(() => receiver.accepted.length === 1, 10_000)

  const replay = capture(env)
  t.equal(await run(['replay', '--webhook', webhookId, '--from', formatReplayDate(Date.now() - 3_600_000), '--to', formatReplayDate(Date.now())], replay), 0, replay.errors.join('\n'))
  t.match(replay.lines[0], /^replay job \d+ started for webhook/)
  await eventually(() => receiver.posts.some((p) => 'replay_job_status' in p.json), 10_000)
  t.equal(receiver.accepted.filter((p) => p.body === JSON.stringify(message.envelope)).length, 2, 'the replay re-delivered the event')

  const usage = capture(env)
  t.equal(await run(['deliveries'], usage), 2)
  t.match(usage.errors[0], /--webhook is required/)
  const unknown = capture(env)
  t.equal(await run(['deliveries', '--webhook', '999'], unknown), 1)
  t.match(unknown.errors[0], /WebhookIdInvalid: No webhook with id \[999\] is registered on this gateway/)
  const badStatus = capture(env)
  t.equal(await run(['deliveries', '--webhook', webhookId, '--status', 'lost'], badStatus), 1)
  t.match(badStatus.errors[0], /status must be one of/)
  const wrongToken = capture({ ...env, OPERATOR_TOKEN: 'nope' })
  t.equal(await run(['list'], wrongToken), 1)
  t.match(wrongToken.errors[0], /Operator token required/)
})
