export * from './fake-demo.js';
export * from './fake-oidc.js';
export * from './fake-openai.js';
export * from './fake-openai-images.js';
export * from './fake-replicate.js';
export * from './fake-search.js';
export * from './fake-smtp.js';
export {
  buildTarball,
  type FakeGitHost,
  type FakeRepo,
  type FakeRepoBranch,
  type RecordedRequest as GitHostRecordedRequest,
  startFakeGitHost,
} from './githost.js';
export * from './hostile-documents.js';
export * from './http-fixture.js';
export * from './images.js';
export * from './mcp-server.js';
export * from './otlp-receiver.js';
