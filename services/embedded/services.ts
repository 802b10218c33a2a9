import type { ServiceDefinition } from '../common/service'
import { accountHistoryService } from '../account-history/service'
import { activityService } from '../activity/service'
import { gatewayService } from '../gateway/service'
import { streamService } from '../stream/service'
import { webhooksService } from '../webhooks/service'

/** Every service, in start order: the embedded runtime runs them all in one process. */
export const ALL_SERVICES: ServiceDefinition[] = [gatewayService, webhooksService, activityService, streamService, accountHistoryService]
