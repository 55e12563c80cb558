export * from './fake-openai.js';
export {
  buildTarball,
  type FakeGitHost,
  type FakeRepo,
  type FakeRepoBranch,
  type RecordedRequest as GitHostRecordedRequest,
  startFakeGitHost,
} from './githost.js';
