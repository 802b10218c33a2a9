/**
 * The walls between services, checked by `make lint` (`make walls`) and
 * test/common/walls.test.ts. Each directory of services/ is one service
 * (services/cli.ts belongs to services/cli); services/common is what they
 * share; services/embedded is the composition root that runs them all in one
 * process, the only module allowed to import every service.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
export default {
  forbidden: [
    {
      name: 'not-to-other-service',
      comment: 'A service imports only itself and services/common (contracts two services share live in services/common or schemas/).',
      severity: 'error',
      from: { path: '^services/([^/.]+)(/|[.]ts$)', pathNot: '^services/embedded/' },
      to: { path: '^services/', pathNot: '^services/($1|common)(/|[.]ts$)' }
    },
    {
      name: 'no-circular',
      comment: 'No import circles anywhere in services/ (type-only imports count too).',
      severity: 'error',
      from: { path: '^services/' },
      to: { circular: true }
    },
    {
      name: 'not-to-tests-or-tools',
      comment: 'Services never import tests, benchmarks or scripts.',
      severity: 'error',
      from: { path: '^services/' },
      to: { path: '^(test|bench|scripts)/' }
    }
  ],
  options: {
    tsConfig: { fileName: 'tsconfig.json' },
    // Type-only imports are dependencies too: a type borrowed from another service is a wall breached.
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' }
  }
}
