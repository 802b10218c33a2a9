import t from 'tap'
import { PROBLEM_TITLES, Problems, type ProblemError } from '../../services/common/errors'
import { openApiValidators } from '../support/openapi'

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
  // Compile-time checks: a resource type outside the spec's enum does not type-check.
  // @ts-expect-error 'webhook' is not a resource_type of disallowed-resource
  Problems.disallowedResource('x', { resource_id: '1', resource_type: 'webhook', section: 'data' })
  // @ts-expect-error section is data or includes
  Problems.notAuthorizedForField('x', { resource_type: 'user', field: 'f', section: 'meta' })
  // @ts-expect-error the fields of resource-unavailable are required
  Problems.resourceUnavailable('x', { resource_id: '1' })
  t.match(Problems.duplicateRules('dup').body(BASE), { type: `${BASE}/duplicate-rules` }, 'id and value are optional')
})
