export * from './githost.js';
