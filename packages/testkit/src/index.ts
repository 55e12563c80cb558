export * from './fake-openai.js';
