import t from 'tap'
import { ECHO_MAX_CHARS } from '../../services/common/echo'
import { AdsError, PROBLEM_DETAIL_MAX_CHARS, PROBLEM_MAX_ITEMS, PROBLEM_TITLES, Problems, type ProblemError } from '../../services/common/errors'
import { bearerRequest } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { openApiValidators, productResourceTypes } from '../support/openapi'

/**
 * Every Problem constructor against the public platform's OpenAPI component
 * schema of its subtype: the shape a client library would parse.
 */

const BASE = 'https://api.twitter.com/2/problems'
const openapi = openApiValidators()

const cases: Array<[string, ProblemError, string]> = [
  ['disallowed-resource', Problems.disallowedResource('This resource is not allowed.', { resource_id: '12', resource_type: 'tweet', section: 'includes' }), 'DisallowedResourceProblem'],
  ['not-authorized-for-field', Problems.notAuthorizedForField('Sorry, you are not authorized to see the field.', { resource_type: 'user', field: 'protected', section: 'data' }), 'FieldUnauthorizedProblem'],
  ['resource-unavailable', Problems.resourceUnavailable('User has been suspended: [12].', { parameter: 'id', resource_id: '12', resource_type: 'user' }), 'ResourceUnavailableProblem'],
  ['client-disconnected', Problems.clientDisconnected(), 'ClientDisconnectedProblem'],
  ['duplicate-rules', Problems.duplicateRules('Duplicate rule.', { id: '1', value: 'cats' }), 'DuplicateRuleProblem'],
  ['invalid-rules', Problems.invalidRules('The rule is invalid.'), 'InvalidRuleProblem'],
  ['noncompliant-rules', Problems.noncompliantRules('The rule set is not compliant.'), 'NonCompliantRulesProblem'],
  ['resource-not-found', Problems.resourceNotFound('id', '12', 'poll'), 'ResourceNotFoundProblem'],
  ['not-authorized-for-resource', Problems.notAuthorizedForResource('Sorry.', { value: '1', resource_id: '1', resource_type: 'user', section: 'data', parameter: 'id' }), 'ResourceUnauthorizedProblem']
]

t.test('every Problem subtype has a constructor whose body matches the OpenAPI schema', async (t) => {
  for (const [suffix, problem, schema] of cases) {
    const body = problem.body(BASE)
    t.equal(body.type, `${BASE}/${suffix}`, `${suffix}: type`)
    t.equal(body.title, PROBLEM_TITLES[problem.suffix], `${suffix}: title`)
    t.equal(body.status, problem.statusCode, `${suffix}: status`)
    t.equal(openapi.errors(schema, body), undefined, `${suffix}: valid ${schema}`)
  }
})

t.test('the required fields are required by the constructors', async (t) => {
  t.throws(() => Problems.resourceNotFound('', '12', 'user'), /parameter/, 'resource-not-found needs a parameter')
  t.throws(() => Problems.resourceUnavailable('gone', { parameter: '', resource_id: '1', resource_type: 'user' }), /parameter/)
  // Compile-time checks: a resource type outside the v2 enum does not type-check.
  // @ts-expect-error 'webhook' is not a resource_type of disallowed-resource
  Problems.disallowedResource('x', { resource_id: '1', resource_type: 'webhook', section: 'data' })
  // @ts-expect-error section is data or includes
  Problems.notAuthorizedForField('x', { resource_type: 'user', field: 'f', section: 'meta' })
  // @ts-expect-error the fields of resource-unavailable are required
  Problems.resourceUnavailable('x', { resource_id: '1' })
  t.match(Problems.duplicateRules('dup').body(BASE), { type: `${BASE}/duplicate-rules` }, 'id and value are optional')
})

t.test('the product\'s own Problems and the resource types it adds match the schemas', async (t) => {
  const withProductTypes = openApiValidators(productResourceTypes)
  const product: Array<[ProblemError, string]> = [
    [Problems.resourceNotFound('webhook_id', '123', 'webhook'), 'ResourceNotFoundProblem'],
    [Problems.resourceNotFound('subscription_id', '9', 'subscription'), 'ResourceNotFoundProblem'],
    [Problems.usageCapped('Usage cap exceeded: Monthly product cap', 'Monthly', 'Product'), 'UsageCapExceededProblem'],
    [Problems.ruleCap('SubscriptionLimitExceeded: at most 2.'), 'RulesCapProblem'],
    [Problems.clientForbidden('Not enrolled.', 'client-not-enrolled', 'https://developer.example.com/enroll'), 'ClientForbiddenProblem']
  ]
  for (const [problem, schema] of product) {
    const body = problem.body(BASE)
    t.equal(withProductTypes.errors(schema, body), undefined, `${problem.suffix}: valid ${schema}`)
    t.equal(body.title, PROBLEM_TITLES[problem.suffix])
  }
  t.match(Problems.usageCapped('x', 'Daily', 'Account').body(BASE), { status: 429, period: 'Daily', scope: 'Account' })
  // Unpatched, the public enum refuses the product's types: the deviation is real and documented, not hidden.
  t.not(openapi.errors('ResourceNotFoundProblem', Problems.resourceNotFound('webhook_id', '1', 'webhook').body(BASE)), undefined)
})

t.test('Problem bodies are bounded whatever the input', async (t) => {
  const many = Array.from({ length: 100_000 }, (_, i) => ({ message: `The \`f${i}\` field is not allowed`, parameters: { [`f${i}`]: ['x'.repeat(10_000)] } }))
  const body = Problems.invalidRequest(many).body(BASE) as { errors: Array<{ parameters: Record<string, string[]> }>; detail: string }
  t.equal(body.errors.length, PROBLEM_MAX_ITEMS)
  t.match(body.detail, /99990 more not listed/)
  t.ok((body.errors[0]?.parameters.f0?.[0]?.length ?? Infinity) <= ECHO_MAX_CHARS + 1, 'each echoed value is capped')
  t.ok(JSON.stringify(body).length < 6000, `small body (${JSON.stringify(body).length} bytes)`)
  t.equal(openapi.errors('InvalidRequestProblem', body), undefined)
  const huge = Problems.resourceNotFound('id', 'y'.repeat(1_000_000), 'tweet').body(BASE)
  t.ok(JSON.stringify(huge).length < 2 * PROBLEM_DETAIL_MAX_CHARS, 'the echoed id and the detail are capped')
  t.equal(openapi.errors('ResourceNotFoundProblem', huge), undefined)
  t.equal(openapi.errors('InvalidRequestProblem', Problems.invalidRequest([]).body(BASE)), undefined, 'never an empty errors list')
  const ads = new AdsError(400, Array.from({ length: 50_000 }, () => ({ code: 'INVALID_PARAMETER' as const, message: 'z'.repeat(5000), parameter: 'p' })))
  t.equal(ads.items.length, PROBLEM_MAX_ITEMS)
  t.ok((ads.items[0]?.message.length ?? Infinity) <= PROBLEM_DETAIL_MAX_CHARS + 1)
})

t.test('over HTTP: invalid-request names each parameter with the value received, bounded', async (t) => {
  const rt = await startTestRuntime(t)
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const bad = await bearerRequest('GET', url, id.bearer, { query: { max_results: 'many' } })
  t.equal(bad.status, 400)
  t.equal(openapi.errors('InvalidRequestProblem', bad.json()), undefined)
  t.same(bad.json<{ errors: unknown[] }>().errors.map((e) => (e as { parameters: unknown }).parameters), [{ max_results: ['many'] }])

  // A 0.7 MB body with 40,000 properties the schema refuses: every one fails, the answer stays small.
  const extra: Record<string, string> = { event_type: 'post.create' }
  for (let i = 0; i < 40_000; i++) extra[`unexpected_${i}`] = 'v'.repeat(4)
  const sent = JSON.stringify({ ...extra, filter: { user_id: '1' } })
  t.ok(sent.length > 700_000, `body of ${sent.length} bytes`)
  const res = await bearerRequest('POST', url, id.bearer, { json: JSON.parse(sent) })
  t.equal(res.status, 400)
  t.ok(res.text.length < 8192, `the error body is ${res.text.length} bytes`)
  t.equal(openapi.errors('InvalidRequestProblem', res.json()), undefined)
  const first = res.json<{ errors: Array<{ parameters: Record<string, string[]> }> }>().errors[0]
  t.same(first?.parameters, { unexpected_0: ['vvvv'] }, 'an extra property is named with its value')

  // An unknown subscription and an unknown webhook: resource-not-found with its required fields.
  const unknownSub = await bearerRequest('DELETE', `${url}/424242`, id.bearer)
  t.equal(unknownSub.status, 404)
  t.equal(openApiValidators(productResourceTypes).errors('ResourceNotFoundProblem', unknownSub.json()), undefined)
  t.match(unknownSub.json(), { parameter: 'subscription_id', resource_id: '424242', resource_type: 'subscription', value: '424242' })
  const unknownHook = await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/424242`, id.bearer)
  t.equal(unknownHook.status, 404)
  t.match(unknownHook.json(), { type: `${BASE}/resource-not-found`, parameter: 'webhook_id', resource_id: '424242', resource_type: 'webhook', value: '424242' })
})
