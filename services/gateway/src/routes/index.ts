// Every route of the gateway, in one list (the router and the OpenAPI document use it).
import type { GatewayDeps } from '../deps.ts';
import type { Route } from '../http/route.ts';
import { healthRoutes } from './health.ts';
import { projectRoutes } from './projects.ts';
import { instanceRoutes } from './instances.ts';
import { credentialRoutes } from './credentials.ts';
import { webhookRoutes } from './webhooks.ts';
import { messageRoutes } from './messages.ts';
import { activityRoutes } from './activity.ts';
import { adminRoutes } from './admin.ts';
import { sandboxRoutes } from './sandbox.ts';
import { openApiRoute } from '../openapi.ts';

export function allRoutes(deps: Pick<GatewayDeps, 'config'>): Route[] {
  const routes: Route[] = [
    ...healthRoutes,
    ...projectRoutes,
    ...instanceRoutes,
    ...credentialRoutes,
    ...webhookRoutes,
    ...messageRoutes,
    ...activityRoutes,
    ...adminRoutes,
    ...(deps.config.networkDriver === 'sandbox' ? sandboxRoutes() : []),
  ] as Route[];
  return [...routes, openApiRoute(routes)];
}
