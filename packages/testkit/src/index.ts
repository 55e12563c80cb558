export * from './fake-demo.js';
export * from './fake-openai.js';
export * from './fake-search.js';
export {
  buildTarball,
  type FakeGitHost,
  type FakeRepo,
  type FakeRepoBranch,
  type RecordedRequest as GitHostRecordedRequest,
  startFakeGitHost,
} from './githost.js';
export * from './http-fixture.js';
export * from './mcp-server.js';
