import { gunzipSync } from 'node:zlib';
import protobuf from 'protobufjs';
import { type ListeningServer, listen } from './listen.js';

/**
 * The trace part of the OTLP protocol (opentelemetry-proto `collector/trace/v1`), written from
 * the specification's field numbers: enough to decode what an SDK exports over OTLP/HTTP.
 */
const TRACE_PROTO = `
syntax = "proto3";
package otlp;
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message InstrumentationScope { string name = 1; string version = 2; repeated KeyValue attributes = 3; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4;
  string name = 5; int32 kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; uint32 dropped_attributes_count = 10; repeated Event events = 11;
  uint32 dropped_events_count = 12; repeated Link links = 13; uint32 dropped_links_count = 14;
  Status status = 15; fixed32 flags = 16;
}
message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; }
message Link { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; repeated KeyValue attributes = 4; }
message Status { string message = 2; int32 code = 3; }
message AnyValue {
  oneof value {
    string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4;
    ArrayValue array_value = 5; KeyValueList kvlist_value = 6; bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
`;

const REQUEST = protobuf
  .parse(TRACE_PROTO, { keepCase: false })
  .root.lookupType('otlp.ExportTraceServiceRequest');

/** OTLP span kinds. */
export const OTLP_SPAN_KIND = { INTERNAL: 1, SERVER: 2, CLIENT: 3, PRODUCER: 4, CONSUMER: 5 } as const;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  status: { code: number; message?: string };
  events: { name: string; attributes: Record<string, unknown> }[];
  links: { traceId: string; spanId: string }[];
  /** Attributes of the resource that exported it (`service.name`…). */
  resource: Record<string, unknown>;
  scope: string;
}

export interface OtlpReceiver extends ListeningServer {
  /** Every span received so far, in arrival order. */
  spans: ReceivedSpan[];
  /** The content types of the export requests received (`application/x-protobuf`, `application/json`). */
  contentTypes: string[];
  /** Resolves with the spans once `predicate` holds for the spans received (polls; rejects after `timeoutMs`). */
  waitFor(predicate: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<ReceivedSpan[]>;
  clear(): void;
}

type Json = Record<string, unknown>;

const hex = (v: unknown): string => {
  if (v === undefined || v === null) return '';
  if (typeof v === 'string') return v.toLowerCase(); // OTLP/JSON: hex already
  return Buffer.from(v as Uint8Array).toString('hex');
};

function anyValue(v: Json | undefined): unknown {
  if (!v) return undefined;
  if ('stringValue' in v) return v.stringValue;
  if ('boolValue' in v) return v.boolValue;
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return Number(v.doubleValue);
  if ('arrayValue' in v) return ((v.arrayValue as Json).values as Json[] | undefined)?.map(anyValue) ?? [];
  if ('kvlistValue' in v) return attributes((v.kvlistValue as Json).values as Json[] | undefined);
  if ('bytesValue' in v) return hex(v.bytesValue);
  return undefined;
}

function attributes(list: Json[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list ?? []) out[kv.key as string] = anyValue(kv.value as Json | undefined);
  return out;
}

/** Both encodings as one object shape (camelCase, as OTLP/JSON spells it). */
function spansOf(req: Json): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of (req.resourceSpans as Json[] | undefined) ?? []) {
    const resource = attributes((rs.resource as Json | undefined)?.attributes as Json[] | undefined);
    for (const ss of (rs.scopeSpans as Json[] | undefined) ?? []) {
      const scope = ((ss.scope as Json | undefined)?.name as string | undefined) ?? '';
      for (const s of (ss.spans as Json[] | undefined) ?? []) {
        const status = (s.status as Json | undefined) ?? {};
        out.push({
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          name: s.name as string,
          kind: Number(s.kind ?? 0),
          attributes: attributes(s.attributes as Json[] | undefined),
          status: { code: Number(status.code ?? 0), message: status.message as string | undefined },
          events: ((s.events as Json[] | undefined) ?? []).map((e) => ({
            name: e.name as string,
            attributes: attributes(e.attributes as Json[] | undefined),
          })),
          links: ((s.links as Json[] | undefined) ?? []).map((l) => ({
            traceId: hex(l.traceId),
            spanId: hex(l.spanId),
          })),
          resource,
          scope,
        });
      }
    }
  }
  return out;
}

/** Decodes one OTLP/HTTP trace export body (`application/x-protobuf` or `application/json`). */
export function decodeOtlpTraces(body: Buffer, contentType: string): ReceivedSpan[] {
  if (contentType.includes('json')) return spansOf(JSON.parse(body.toString('utf8')) as Json);
  const msg = REQUEST.decode(body);
  const obj = REQUEST.toObject(msg, { longs: String, defaults: false, oneofs: false }) as Json;
  return spansOf(obj);
}

/**
 * An OTLP/HTTP trace receiver on loopback (`POST /v1/traces`, protobuf or JSON, gzip or not):
 * what an OpenTelemetry collector would accept, kept in memory for assertions. Point an SDK at
 * it with `OTEL_EXPORTER_OTLP_ENDPOINT=<url>`.
 */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];
  const srv = await listen((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url?.split('?')[0] !== '/v1/traces') {
        res.statusCode = 404;
        res.end();
        return;
      }
      const type = String(req.headers['content-type'] ?? '');
      try {
        let body = Buffer.concat(chunks);
        if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
        spans.push(...decodeOtlpTraces(body, type));
        contentTypes.push(type.split(';')[0] as string);
      } catch (err) {
        res.statusCode = 400;
        res.end(String(err));
        return;
      }
      res.statusCode = 200;
      if (type.includes('json')) {
        res.setHeader('content-type', 'application/json');
        res.end('{}');
      } else {
        res.setHeader('content-type', 'application/x-protobuf');
        res.end();
      }
    });
  });
  return {
    ...srv,
    spans,
    contentTypes,
    async waitFor(predicate, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(spans)) {
        if (Date.now() > deadline) {
          throw new Error(`OTLP receiver: condition not met; spans: ${spans.map((s) => s.name).join(', ')}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      return spans;
    },
    clear() {
      spans.length = 0;
      contentTypes.length = 0;
    },
  };
}
