import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import ipaddr from 'ipaddr.js';
import { appError } from '../../errors/index.js';
import { traceHeaders } from '../../telemetry/tracing.js';

/**
 * Outbound HTTP for tools (web_fetch, callbacks, MCP): refuses loopback, private, link-local,
 * CGNAT, multicast, documentation, reserved and cloud-metadata addresses unless the operator
 * allowlist `OUTBOUND_ALLOWLIST` (comma-separated hosts, IPs or CIDRs) permits them. IPv6
 * forms that carry an IPv4 address (mapped, compatible, SIIT, NAT64, 6to4, Teredo, ISATAP) are
 * judged by that IPv4 address too, so `[64:ff9b::a9fe:a9fe]` is as refused as 169.254.169.254.
 * The check runs on the address the connection actually uses (custom DNS lookup), so DNS
 * rebinding cannot slip a private address past it.
 */
const BLOCKED_V4 = new net.BlockList();
for (const [net4, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  BLOCKED_V4.addSubnet(net4, prefix, 'ipv4');
}
/** IPv6 space that is not globally reachable (IANA special-purpose registry, plus site-local). */
const BLOCKED_V6 = new net.BlockList();
for (const [net6, prefix] of [
  // Unspecified, loopback, IPv4-compatible; the mapped, SIIT and NAT64 (64:ff9b::/96) forms in
  // this block are judged by the IPv4 address they carry.
  ['::', 8],
  ['64:ff9b:1::', 48], // local-use IPv4/IPv6 translation
  ['100::', 64], // discard-only
  ['100:0:0:1::', 64], // dummy prefix
  ['2001::', 23], // IETF protocol assignments (Teredo, benchmarking, ORCHID…)
  ['2001:db8::', 32], // documentation
  ['3fff::', 20], // documentation
  ['5f00::', 16], // SRv6 SIDs
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated, still routed inside some networks)
  ['ff00::', 8], // multicast
] as const) {
  BLOCKED_V6.addSubnet(net6, prefix, 'ipv6');
}

const v4 = (b: number[], at: number) => b.slice(at, at + 4).join('.');

/** The IPv4 addresses an IPv6 address carries, by the translation and tunnel forms that embed one. */
function embeddedV4(addr: ipaddr.IPv6): string[] {
  const b = addr.toByteArray();
  const range = addr.range();
  if (range === 'ipv4Mapped' || range === 'rfc6145' || range === 'rfc6052') return [v4(b, 12)];
  if (b.slice(0, 12).every((x) => x === 0)) return [v4(b, 12)]; // IPv4-compatible ::a.b.c.d
  if (range === '6to4') return [v4(b, 2)];
  if (range === 'teredo')
    return [
      v4(b, 4),
      b
        .slice(12, 16)
        .map((x) => x ^ 0xff)
        .join('.'),
    ];
  // ISATAP interface identifier: ::0:5efe:a.b.c.d or ::200:5efe:a.b.c.d under any prefix.
  if ((b[8] === 0 || b[8] === 2) && b[9] === 0 && b[10] === 0x5e && b[11] === 0xfe) return [v4(b, 12)];
  return [];
}

/** Whether connecting to `address` (an IP literal) would reach only public address space. */
export function isPublicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  const addr = ipaddr.parse(address);
  if (addr.kind() === 'ipv4') return !BLOCKED_V4.check(addr.toString(), 'ipv4');
  const v6 = addr as ipaddr.IPv6;
  const embedded = embeddedV4(v6);
  if (embedded.some((a) => BLOCKED_V4.check(a, 'ipv4'))) return false;
  const range = v6.range();
  // Translation forms are exactly as reachable as the IPv4 address they carry.
  if (range === 'ipv4Mapped' || range === 'rfc6145' || range === 'rfc6052') return true;
  return !BLOCKED_V6.check(v6.toNormalizedString(), 'ipv6');
}

export class OutboundBlockedError extends Error {
  override name = 'OutboundBlockedError';
}

export interface OutboundPolicy {
  hosts: Set<string>;
  nets: net.BlockList;
}

export function parseAllowlist(value: string | undefined): OutboundPolicy {
  const hosts = new Set<string>();
  const nets = new net.BlockList();
  for (const raw of (value ?? '').split(',')) {
    const item = raw.trim().toLowerCase();
    if (!item) continue;
    const [addr, bits] = item.split('/');
    const family = addr ? net.isIP(addr) : 0;
    if (addr && family) {
      const type = family === 4 ? 'ipv4' : 'ipv6';
      if (bits !== undefined) nets.addSubnet(addr, Number(bits), type);
      else nets.addAddress(addr, type);
    } else {
      hosts.add(item);
    }
  }
  return { hosts, nets };
}

function mappedV4(address: string): string | undefined {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return m?.[1];
}

export function isAddressAllowed(address: string, hostname: string, policy: OutboundPolicy): boolean {
  if (policy.hosts.has(hostname.toLowerCase())) return true;
  const v4 = mappedV4(address);
  const addr = v4 ?? address;
  const type = net.isIP(addr) === 6 ? 'ipv6' : 'ipv4';
  if (policy.nets.check(addr, type)) return true;
  return isPublicAddress(addr);
}

/** Every address a host name resolves to (the system resolver: `getaddrinfo`). */
export type HostResolver = (host: string) => Promise<dns.LookupAddress[]>;

const systemResolver: HostResolver = (host) => dns.promises.lookup(host, { all: true });
let resolver: HostResolver = systemResolver;

/**
 * Replaces the resolver both the URL check and the connection's lookup use, until the returned
 * function restores it. Only tests call it: a resolver that answers a public address once and a
 * private one afterwards is how DNS rebinding looks from here.
 */
export function setHostResolverForTests(fn: HostResolver): () => void {
  resolver = fn;
  return () => {
    resolver = systemResolver;
  };
}

/**
 * The `lookup` of every outbound connection made for a caller: resolves `host` and refuses,
 * before any connection, a name any of whose addresses the policy blocks. The check and the
 * connection use the same answer, so a name that resolves elsewhere by the time of the
 * connection (DNS rebinding) is judged by the address actually dialled.
 */
export function guardedLookup(policy: OutboundPolicy): net.LookupFunction {
  return (host, options, callback) => {
    const name = host.replace(/^\[|\]$/g, '');
    const answer = net.isIP(name)
      ? Promise.resolve([{ address: name, family: net.isIP(name) }])
      : resolver(name);
    answer.then(
      (list) => {
        const ok = list.filter((a) => isAddressAllowed(a.address, name, policy));
        if (ok.length === 0 || ok.length !== list.length) {
          return callback(new OutboundBlockedError(`Blocked address for ${name}`), '', 0);
        }
        if ((options as { all?: boolean }).all)
          return (callback as (e: null, a: dns.LookupAddress[]) => void)(null, ok);
        const first = ok[0] as dns.LookupAddress;
        callback(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, '', 0),
    );
  };
}

/** Throws OutboundBlockedError when the URL may not be reached (scheme, literal IP, DNS). */
export async function assertUrlAllowed(url: URL, policy: OutboundPolicy): Promise<void> {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new OutboundBlockedError(`Only http and https URLs are allowed`);
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const addresses = net.isIP(host) ? [{ address: host }] : await resolver(host);
  for (const a of addresses) {
    if (!isAddressAllowed(a.address, host, policy)) {
      throw new OutboundBlockedError(`Refusing to connect to ${host}: private or reserved address`);
    }
  }
}

/**
 * Refuses, as 400 naming `field`, a URL the service will later call (webhook, callback, MCP
 * server) when the guard would block it: found at create/update, not silently at call time.
 * A host that does not resolve is refused only with `unresolvable: 'refuse'`; otherwise it
 * is accepted (DNS may change; the call reports it).
 */
export async function assertOutboundUrlAccepted(
  raw: string,
  policy: OutboundPolicy,
  field: string,
  opts: { unresolvable: 'refuse' | 'accept' },
): Promise<void> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw appError('URL_NOT_HTTP', { field, details: { field } });
  }
  try {
    await assertUrlAllowed(url, policy);
  } catch (err) {
    if (err instanceof OutboundBlockedError) {
      throw appError('URL_NOT_ALLOWED', { field, message: err.message, details: { field } });
    }
    if (opts.unresolvable === 'refuse') {
      throw appError('URL_UNRESOLVABLE', { field, hostname: url.hostname, details: { field } });
    }
  }
}

export interface OutboundResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  truncated: boolean;
}

/** One guarded HTTP request with a total timeout and a response size cap. */
export async function outboundRequest(
  rawUrl: string,
  opts: {
    policy: OutboundPolicy;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    timeoutMs: number;
    maxBytes: number;
    signal?: AbortSignal;
    maxRedirects?: number;
  },
): Promise<OutboundResponse> {
  let url = new URL(rawUrl);
  for (let hop = 0; ; hop++) {
    await assertUrlAllowed(url, opts.policy);
    const res = await requestOnce(url, opts);
    const location = res.headers.location;
    if (res.status >= 300 && res.status < 400 && location && opts.method !== 'POST') {
      if (hop >= (opts.maxRedirects ?? 5)) throw new Error('Too many redirects');
      url = new URL(location, url);
      continue;
    }
    return res;
  }
}

function requestOnce(url: URL, opts: Parameters<typeof outboundRequest>[1]): Promise<OutboundResponse> {
  const lib = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = lib.request(
      url,
      {
        method: opts.method ?? 'GET',
        headers: {
          'user-agent': 'AI-Suite-Agent/1.0',
          ...traceHeaders(),
          ...opts.headers,
          // A known length, never chunked: receivers on common stacks (Python's http.server,
          // many signature verifiers) read exactly Content-Length bytes and see nothing otherwise.
          ...(opts.body !== undefined ? { 'content-length': String(Buffer.byteLength(opts.body)) } : {}),
        },
        lookup: guardedLookup(opts.policy),
        signal: opts.signal,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        let truncated = false;
        res.on('data', (c: Buffer) => {
          if (truncated) return;
          size += c.length;
          if (size > opts.maxBytes) {
            truncated = true;
            chunks.push(c.subarray(0, c.length - (size - opts.maxBytes)));
            res.destroy();
            finish();
            return;
          }
          chunks.push(c);
        });
        const finish = () => {
          clearTimeout(timer);
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks),
            truncated,
          });
        };
        res.on('end', finish);
        res.on('error', (err) => (truncated ? undefined : reject(err)));
      },
    );
    const timer = setTimeout(
      () => req.destroy(new Error(`Timed out after ${opts.timeoutMs} ms`)),
      opts.timeoutMs,
    );
    req.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.end(opts.body);
  });
}

/** Elements dropped with their content. */
const SKIPPED = new Set(['script', 'style', 'noscript', 'template', 'svg', 'head']);
/** Tags that end a line of text. */
const LINE_ENDS = new Set([
  'br',
  '/p',
  '/div',
  '/h1',
  '/h2',
  '/h3',
  '/h4',
  '/h5',
  '/h6',
  '/li',
  '/tr',
  '/section',
  '/article',
]);
const TAG_NAME = /\/?[a-z][a-z0-9]*/y;

/**
 * Readable text of an HTML page: scripts, styles and tags removed, entities decoded. One pass,
 * linear in the page's length whatever it holds: every search starts where the last one ended,
 * and a search that found nothing is not made again (regular expressions with lazy spans and
 * back-references took quadratic time on a page of `<a<a<a…`: minutes of a blocked event loop
 * for a 2 MB answer to `web_fetch`).
 */
export function htmlToText(html: string): string {
  // ASCII-only lower case keeps every index where it was (full Unicode lower-casing may not).
  const lower = html.replace(/[A-Z]+/g, (m) => m.toLowerCase());
  const out: string[] = [];
  const unclosed = new Set<string>();
  let noCommentEnd = false;
  let gt = -1;
  let title: string | undefined;
  const t0 = lower.indexOf('<title');
  if (t0 >= 0) {
    const open = lower.indexOf('>', t0);
    const close = open < 0 ? -1 : lower.indexOf('</title>', open);
    if (close >= 0) title = html.slice(open + 1, close).trim();
  }
  let i = 0;
  while (i < html.length) {
    const lt = html.indexOf('<', i);
    if (lt < 0) {
      out.push(html.slice(i));
      break;
    }
    out.push(html.slice(i, lt));
    if (!noCommentEnd && lower.startsWith('<!--', lt)) {
      const end = lower.indexOf('-->', lt + 4);
      if (end >= 0) {
        out.push(' ');
        i = end + 3;
        continue;
      }
      noCommentEnd = true;
    }
    if (gt < lt) gt = html.indexOf('>', lt);
    if (gt < 0) {
      // No tag can end any more: the rest is text.
      out.push(html.slice(lt));
      break;
    }
    if (gt === lt + 1) {
      out.push('<');
      i = lt + 1;
      continue;
    }
    TAG_NAME.lastIndex = lt + 1;
    const name = TAG_NAME.exec(lower)?.[0];
    if (name && SKIPPED.has(name) && !unclosed.has(name)) {
      const close = lower.indexOf(`</${name}>`, gt);
      if (close >= 0) {
        out.push(' ');
        i = close + name.length + 3;
        continue;
      }
      unclosed.add(name);
    }
    out.push(name && LINE_ENDS.has(name) ? '\n' : ' ');
    i = gt + 1;
  }
  const decoded = decodeEntities(out.join(''))
    .replace(/[ \t\f\v\u00a0]+/g, ' ')
    .replace(/ *\n[ \n]*/g, '\n')
    .trim();
  return title ? `${decodeEntities(title)}\n\n${decoded}` : decoded;
}

function decodeEntities(s: string): string {
  const named: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' };
  return s.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (m, e: string) => {
    if (e[0] === '#') {
      const code = e[1] === 'x' || e[1] === 'X' ? Number.parseInt(e.slice(2), 16) : Number(e.slice(1));
      return Number.isFinite(code) && code > 0 && code < 0x110000 ? String.fromCodePoint(code) : m;
    }
    return named[e.toLowerCase()] ?? m;
  });
}
