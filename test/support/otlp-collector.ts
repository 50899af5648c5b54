// An OTLP/HTTP (JSON) trace receiver for tests and the benchmark: processes started with
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = `url` and OTEL_EXPORTER_OTLP_PROTOCOL = http/json export
// their spans to it, and it keeps every one.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A span as both exporters of the tests give it (OTLP here, in memory in-process): ids, parent
 *  id, name, kind (the API's numbering) and service. */
export interface SpanRecord {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  service: string;
  attributes: Record<string, unknown>;
  /** Resource attributes of the process that made the span. */
  resource?: Record<string, unknown>;
}

/** A span as exported over OTLP: also its process's resource and its times. */
export interface CollectedSpan extends SpanRecord {
  resource: Record<string, unknown>;
  /** Epoch milliseconds, with the fraction the exporter gave. */
  startMs: number;
  endMs: number;
}

export interface OtlpCollector {
  url: string;
  spans: CollectedSpan[];
  close(): Promise<void>;
}

export async function startOtlpCollector(): Promise<OtlpCollector> {
  const spans: CollectedSpan[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        spans.push(...fromOtlpJson(JSON.parse(Buffer.concat(chunks).toString('utf8'))));
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    spans,
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
const valueOf = (v: OtlpValue) => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue));
const attributesOf = (list: { key: string; value: OtlpValue }[] = []) => Object.fromEntries(list.map((a) => [a.key, valueOf(a.value)]));
/** OTLP times are nanoseconds since the epoch, as decimal strings (beyond a double's precision). */
const epochMs = (nanos: string | number) => Number(BigInt(nanos) / 1000n) / 1000;

function fromOtlpJson(body: any): CollectedSpan[] {
  const out: CollectedSpan[] = [];
  for (const rs of body.resourceSpans ?? []) {
    const resource = attributesOf(rs.resource?.attributes);
    const service = String(resource['service.name']);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId || undefined,
          name: s.name,
          kind: (s.kind ?? 1) - 1, // OTLP kinds start at 1 (INTERNAL); the API's at 0
          service,
          attributes: attributesOf(s.attributes),
          resource,
          startMs: epochMs(s.startTimeUnixNano),
          endMs: epochMs(s.endTimeUnixNano),
        });
      }
    }
  }
  return out;
}
