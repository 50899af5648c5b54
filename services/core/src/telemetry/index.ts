// Tracing for every Switchboard process: start it with startTelemetry() at the top of main(),
// then use inSpan()/withParent()/injectTraceparent() around work that crosses a process boundary.
export { checkTelemetryEnv, startTelemetry, telemetryConfigured, type Telemetry, type TelemetryOptions } from './setup.ts';
export {
  activeTraceIds,
  contextFrom,
  contextFromHeaders,
  inSpan,
  injectTraceparent,
  markFailed,
  outsideTrace,
  preferActive,
  SpanKind,
  SpanStatusCode,
  tracer,
  withParent,
  withTraceHeaders,
  type Span,
  type SpanOptions,
} from './spans.ts';
export { tracedConsumer, tracedPublish } from './bus.ts';
