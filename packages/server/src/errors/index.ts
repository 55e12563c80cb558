export { AppError, appError, type ErrorArgs, type ErrorBody } from './app-error.js';
export { ERRORS, type ErrorDefinition, type ErrorKey, UNAVAILABLE_RETRY_AFTER_SECONDS } from './table.js';
export { type IssueLike, validationError } from './validation.js';
