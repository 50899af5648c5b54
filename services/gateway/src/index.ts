export { createGatewayApp } from './app.ts';
export { buildOpenApiDocument } from './openapi.ts';
export { allRoutes } from './routes/index.ts';
export type { GatewayDeps, InstanceResources } from './deps.ts';
export { listen } from './listen.ts';
export { SendItemWriter } from './sending/send-item-writer.ts';
export { InstanceTokenLookup } from './http/instance-token-lookup.ts';
