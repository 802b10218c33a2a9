import type { ServiceDefinition } from '../common/service'
import { gatewayService } from '../gateway/service'

/** Every service, in start order: the embedded runtime runs them all in one process. */
export const ALL_SERVICES: ServiceDefinition[] = [gatewayService]
