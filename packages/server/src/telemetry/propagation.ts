import diagnostics from 'node:diagnostics_channel';
import { injectTraceHeaders } from './tracing.js';

interface UndiciRequest {
  addHeader?: (name: string, value: string) => void;
  headers?: string | string[];
}

/**
 * `traceparent` on requests made with the global `fetch` (undici), through its diagnostics
 * channel. Requests on Node's HTTP client add it where they are made (`traceOutgoing`): on
 * Node 20 its channel fires after the headers are sent. Returns the unsubscribe.
 */
export function propagateOutgoing(): () => void {
  const onCreate = (message: unknown) => {
    const req = (message as { request?: UndiciRequest }).request;
    if (!req) return;
    injectTraceHeaders((name, value) => {
      if (typeof req.addHeader === 'function') req.addHeader(name, value);
      else if (Array.isArray(req.headers)) req.headers.push(name, value);
      else if (typeof req.headers === 'string') req.headers += `${name}: ${value}\r\n`;
    });
  };
  diagnostics.subscribe('undici:request:create', onCreate);
  return () => diagnostics.unsubscribe('undici:request:create', onCreate);
}
