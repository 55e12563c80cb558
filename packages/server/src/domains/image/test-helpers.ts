import zlib from 'node:zlib';
import {
  type FakeOpenAIImages,
  type FakeReplicate,
  type HttpReply,
  startFakeOpenAIImages,
  startFakeReplicate,
  startHttpFixture,
  syntheticScanPng,
} from '@ai-suite/testkit';
import sharp from 'sharp';
import { type StartTestServerOptions, startTestServer, type TestServer } from '../../test/harness.js';

export const REPLICATE_TOKEN = 'r8_secret_token_for_tests';
export const OPENAI_KEY = 'sk-secret-key-for-tests';
/** $0.01 per Replicate image; $0.02 per OpenAI image plus $5 / $40 per million tokens. */
export const REPLICATE_PRICE_MICROS = 10_000;
export const OPENAI_PRICE_MICROS = 20_000;

export interface ImageTestServer extends TestServer {
  replicate: FakeReplicate;
  openai: FakeOpenAIImages;
}

/** A test server whose image providers are the fakes of testkit (both on loopback). */
export async function startImageTestServer(opts: StartTestServerOptions = {}): Promise<ImageTestServer> {
  const replicate = await startFakeReplicate({ token: REPLICATE_TOKEN });
  const openai = await startFakeOpenAIImages({ apiKey: OPENAI_KEY });
  const ts = await startTestServer({
    ...opts,
    env: {
      IMAGE_MODEL: 'acme/scan-gen',
      IMAGE_MODEL_ID: 'scan-gen',
      IMAGE_MODEL_PRICE_PER_IMAGE: '0.01',
      REPLICATE_BASE_URL: replicate.baseUrl,
      REPLICATE_API_TOKEN: REPLICATE_TOKEN,
      IMAGE_ALT_MODEL: 'gpt-image-1',
      IMAGE_ALT_BASE_URL: openai.baseUrl,
      IMAGE_ALT_API_KEY: OPENAI_KEY,
      IMAGE_ALT_MODEL_PRICE_PER_IMAGE: '0.02',
      IMAGE_ALT_INPUT_PRICE_PER_MTOK: '5',
      IMAGE_ALT_OUTPUT_PRICE_PER_MTOK: '40',
      IMAGE_PREFER_WAIT_SECONDS: '1',
      IMAGE_POLL_INITIAL_MS: '5',
      IMAGE_POLL_MAX_MS: '20',
      IMAGE_MAX_BYTES: '300000',
      IMAGE_MAX_PIXELS: '4000000',
      // `localhost` may be fetched; 127.0.0.1 by its address stays private.
      OUTBOUND_ALLOWLIST: 'localhost',
      ...opts.env,
    },
  });
  return {
    ...ts,
    replicate,
    openai,
    async close() {
      await ts.close();
      await replicate.close();
      await openai.close();
    },
  };
}

/** A PNG whose header declares `width`×`height` pixels over a tiny body: an image bomb. */
export async function imageBomb(width = 100_000, height = 100_000): Promise<Buffer> {
  const png = Buffer.from(
    await sharp({ create: { width: 1, height: 1, channels: 3, background: '#000' } })
      .png()
      .toBuffer(),
  );
  // IHDR data starts at byte 16 (8 signature + 4 length + 4 type); its CRC follows 13 bytes of data.
  png.writeUInt32BE(width, 16);
  png.writeUInt32BE(height, 20);
  png.writeUInt32BE(zlib.crc32(png.subarray(12, 29)), 29);
  return png;
}

/** A loopback server for `image_url` tests: a scan, an HTML page, a redirect to a private address. */
export async function startImageSite() {
  const scan = await syntheticScanPng({ width: 48, height: 48, seed: 3 });
  let site = '';
  const fixture = await startHttpFixture((req): HttpReply => {
    if (req.path === '/scan.png') return { headers: { 'content-type': 'image/png' }, body: scan };
    if (req.path === '/scan-as-text') return { headers: { 'content-type': 'text/plain' }, body: scan };
    if (req.path === '/page.html')
      return { headers: { 'content-type': 'text/html' }, body: '<html>hi</html>' };
    if (req.path === '/html-as-png')
      return { headers: { 'content-type': 'image/png' }, body: '<html>hi</html>' };
    if (req.path === '/to-private')
      return { status: 302, headers: { location: `${site}/scan.png` }, body: '' };
    if (req.path === '/missing') return { status: 404, body: 'nope' };
    return { status: 404, body: '' };
  });
  site = fixture.url; // http://127.0.0.1:<port>: private by address
  const publicish = fixture.url.replace('127.0.0.1', 'localhost'); // allowed by OUTBOUND_ALLOWLIST
  return { fixture, scan, privateUrl: site, url: publicish, close: () => fixture.close() };
}
