export * from './fake-openai.js';
export * from './fake-search.js';
export * from './http-fixture.js';
export * from './mcp-server.js';
