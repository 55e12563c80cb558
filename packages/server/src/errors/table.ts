/**
 * THE error table: every error the service answers, with its status, its `code` (when the body
 * carries one) and its message, word for word as in the interface specification (section 7 and
 * the endpoint sections). A `{name}` in a message is filled from the arguments of `appError`;
 * `variants` are the other wordings the specification itself gives for the same error.
 * `docs/errors.md` is generated from this table (`pnpm --filter @ai-suite/server errors-doc`).
 */

/** Seconds a caller is told to wait when the database is unavailable (a restart takes a few). */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

export interface ErrorDefinition {
  status: number;
  /** The body's `code`; absent when the specification gives the error without one. */
  code?: string;
  message: string;
  variants?: Readonly<Record<string, string>>;
  /** Response headers every instance carries. */
  headers?: Readonly<Record<string, string>>;
}

export const ERRORS = {
  AGENT_TOOL_SERVER_UNKNOWN: {
    status: 400,
    code: 'TOOL_SERVER_NOT_FOUND',
    message: '{field}: no tool server with this id is connected to the workspace',
  },
  AMOUNT_IS_TOO_LARGE: { status: 400, message: 'Amount "{s}" is too large' },
  API_KEY_LIMIT_REACHED: {
    status: 400,
    code: 'API_KEY_LIMIT_REACHED',
    message: 'A workspace can have at most {MAX_ACTIVE_KEYS} active API keys',
  },
  API_KEY_MALFORMED: { status: 400, message: 'API key must be "svc_ai_" followed by 64 letters or digits' },
  APPROVAL_ARGUMENTS_MISMATCH: {
    status: 400,
    code: 'INVALID_ARGUMENTS',
    message: "arguments do not match the tool's inputSchema: {mismatch}",
  },
  APPROVAL_ARGUMENTS_TOO_LARGE: {
    status: 400,
    code: 'INVALID_ARGUMENTS',
    message: 'arguments exceed {maxBytes} bytes',
  },
  APPROVAL_INPUT_SCHEMA_UNUSABLE: {
    status: 400,
    code: 'INVALID_ARGUMENTS',
    message: "The tool's inputSchema cannot be used to check arguments: {reason}",
  },
  APPROVAL_TOOL_UNKNOWN: {
    status: 400,
    code: 'UNKNOWN_TOOL',
    message:
      '{field}: unknown tool "{name}" (not a platform, custom, integration-pack or configured MCP server tool)',
  },
  CREDIT_AMOUNT_NOT_POSITIVE: { status: 400, message: 'Credit amount must be greater than zero' },
  DELIVERABLES_DISABLED: {
    status: 400,
    code: 'DELIVERABLES_DISABLED',
    message: 'Deliverables are disabled for this agent',
  },
  DEST_FOLDER_REQUIRED: { status: 400, message: 'destFolderPath is required for move' },
  DOCUMENT_LIMIT_EXCEEDED: { status: 400, code: 'DOCUMENT_LIMIT_EXCEEDED', message: '{limit}' },
  EMAIL_MALFORMED: { status: 400, message: 'Invalid email "{email}"' },
  FILE_REQUIRED: { status: 400, message: 'At least one file is required' },
  IMAGE_DATA_URI_NOT_BASE64: {
    status: 400,
    code: 'INVALID_IMAGE',
    message: 'image must be base64 (a data: URI needs ;base64)',
  },
  IMAGE_FETCH_FAILED: {
    status: 400,
    code: 'IMAGE_FETCH_FAILED',
    message: 'image_url could not be fetched: {msg}',
  },
  IMAGE_FETCH_HTTP_ERROR: {
    status: 400,
    code: 'IMAGE_FETCH_FAILED',
    message: 'image_url could not be fetched: HTTP {status}',
  },
  IMAGE_FETCH_REDIRECT_WITHOUT_LOCATION: {
    status: 400,
    code: 'IMAGE_FETCH_FAILED',
    message: 'image_url redirects without a location',
  },
  IMAGE_FETCH_TOO_MANY_REDIRECTS: {
    status: 400,
    code: 'IMAGE_FETCH_FAILED',
    message: 'image_url redirects more than {maxRedirects} times',
  },
  IMAGE_NOT_BASE64: { status: 400, code: 'INVALID_IMAGE', message: 'image is not valid base64' },
  IMAGE_TOO_MANY_PIXELS: {
    status: 400,
    code: 'IMAGE_TOO_LARGE',
    message: 'The image has {width}×{height} pixels, over the limit of {maxPixels}',
  },
  IMAGE_UNREADABLE: { status: 400, code: 'INVALID_IMAGE', message: 'The image could not be read' },
  IMAGE_URL_NOT_ALLOWED: {
    status: 400,
    code: 'URL_NOT_ALLOWED',
    message: 'image_url is not allowed: {message}',
  },
  IMAGE_URL_NOT_HTTP: { status: 400, code: 'URL_NOT_ALLOWED', message: 'image_url must be an http(s) URL' },
  INTEGRATION_MENTION: { status: 400, message: 'Integration mentions must use the platform webhook' },
  INVALID_AMOUNT: { status: 400, message: 'Invalid amount "{s}": use a non-negative number of dollars' },
  INVALID_BRANCH: { status: 400, message: 'Invalid branch "{ref}"' },
  INVALID_CURRENT_PASSWORD: {
    status: 400,
    code: 'INVALID_CURRENT_PASSWORD',
    message: 'currentPassword is incorrect',
  },
  INVALID_CURSOR: { status: 400, code: 'INVALID_CURSOR', message: 'Invalid cursor' },
  INVALID_EMAIL: { status: 400, code: 'INVALID_EMAIL', message: 'email must be a valid email address' },
  INVALID_FILE_NAME: { status: 400, code: 'INVALID_PATH', message: 'Invalid file name "{name}": {problem}' },
  INVALID_FILE_TYPE: {
    status: 400,
    message: 'Invalid fileType. Must be one of: image, deliverable, document, file',
  },
  INVALID_FOLDER_NAME: {
    status: 400,
    code: 'INVALID_PATH',
    message: 'Invalid folder name "{name}": {problem}',
  },
  INVALID_IMPORT_KIND: { status: 400, message: 'kind must be folder, zip or files' },
  INVALID_INPUT: { status: 400, code: 'INVALID_INPUT', message: '{message}' },
  INVALID_LOGIN_HINT: { status: 400, message: 'loginHint must be a string of at most 320 characters' },
  INVALID_MODEL: { status: 400, code: 'INVALID_MODEL', message: 'Invalid model' },
  INVALID_OPERATION: {
    status: 400,
    code: 'INVALID_OPERATION',
    message: 'operation generate takes no {given}; use operation edit',
  },
  INVALID_ORIGIN: { status: 400, message: 'Invalid origin "{o}": use scheme://host[:port]' },
  INVALID_PASSWORD: {
    status: 400,
    code: 'INVALID_PASSWORD',
    message: 'password must be at most {PASSWORD_MAX_LENGTH} characters',
  },
  INVALID_PATH: { status: 400, code: 'INVALID_PATH', message: 'Invalid path "{input}": {reason}' },
  INVALID_REPO_URL: { status: 400, message: 'Invalid GitHub repository URL' },
  INVALID_REQUEST_BODY: { status: 400, message: 'Invalid request body' },
  INVALID_RETURN_TO: {
    status: 400,
    code: 'INVALID_RETURN_TO',
    message: 'returnTo must be a relative path on this site (starting with a single /)',
  },
  INVALID_TOKEN_QUOTA: {
    status: 400,
    message: 'Invalid token quota "{input}": use a non-negative integer or "unlimited"',
  },
  INVALID_TOOL_BINDING: { status: 400, code: 'INVALID_TOOL_BINDING', message: 'Unknown tool: {toolId}' },
  INVALID_ZIP: { status: 400, code: 'INVALID_ZIP', message: 'Invalid zip file: {message}' },
  INVITATION_INVALID: { status: 400, code: 'INVITATION_INVALID', message: 'Invalid or expired invitation' },
  LAST_MESSAGE_INVALID: { status: 400, message: 'Last message must have valid content' },
  MESSAGES_REQUIRED: { status: 400, message: 'Messages array is required' },
  MISSING_FILEID_OR_FILETYPE: { status: 400, message: 'Missing fileId or fileType' },
  MISSING_IMAGE_INPUT: {
    status: 400,
    code: 'MISSING_IMAGE_INPUT',
    message: 'An edit needs one of image, image_url or raw_image_id',
  },
  MULTIPLE_IMAGE_INPUTS: {
    status: 400,
    code: 'MULTIPLE_IMAGE_INPUTS',
    message: 'Give only one of image, image_url or raw_image_id',
  },
  NAME_REQUIRED: { status: 400, message: 'name is required' },
  NEW_NAME_REQUIRED: { status: 400, message: 'newName is required for rename' },
  NO_FILES_TO_IMPORT: { status: 400, message: 'No files to import' },
  NO_PASSWORD: {
    status: 400,
    code: 'NO_PASSWORD',
    message: 'This account signs in through the identity provider and has no password to change',
  },
  OIDC_STATE_INVALID: {
    status: 400,
    code: 'OIDC_STATE_INVALID',
    message: 'Invalid or expired sign-in attempt: start again',
  },
  PASSWORD_REQUIRED: {
    status: 400,
    code: 'PASSWORD_REQUIRED',
    message: 'password is required to create your account',
  },
  PROMPT_REQUIRED: { status: 400, message: 'Prompt is required' },
  PROVIDER_NOT_ALLOWED: {
    status: 400,
    code: 'PROVIDER_NOT_ALLOWED',
    message: 'The openai provider is allowed only with profile "ultrasound"',
  },
  RAG_FILE_TOO_LARGE: {
    status: 400,
    code: 'FILE_TOO_LARGE',
    message: 'File {filename} exceeds maximum size of 100MB',
  },
  REQUEST_ABORTED: { status: 400, code: 'REQUEST_ABORTED', message: 'Request aborted' },
  ROOT_FOLDER_RENAME: { status: 400, message: 'The root folder cannot be renamed' },
  RUN_NOT_ACTIVE: { status: 400, message: 'Run is {status}' },
  S3_NOT_CONFIGURED: {
    status: 400,
    code: 'S3_NOT_CONFIGURED',
    message: 'S3_BUCKET is not set: set the S3_* variables of the bucket to move {p0}',
  },
  SCHEDULE_CRON_INTERVAL_TOO_SHORT: {
    status: 400,
    code: 'CRON_INTERVAL_TOO_SHORT',
    message: 'cron fires every {gap} seconds; the minimum interval is {minSeconds} seconds',
  },
  SCHEDULE_CRON_INVALID: { status: 400, code: 'INVALID_CRON', message: 'Invalid cron expression: {reason}' },
  SCHEDULE_LIMIT_REACHED: {
    status: 400,
    code: 'TOO_MANY_SCHEDULES',
    message: 'An agent has at most {max} schedules',
  },
  SCHEDULE_TIMEZONE_UNKNOWN: {
    status: 400,
    code: 'INVALID_TIMEZONE',
    message: 'Unknown time zone: {timezone}',
  },
  SCHEDULE_WEBHOOK_URL_NOT_HTTP: { status: 400, message: 'metadata.webhookUrl must be an http(s) URL' },
  TOOL_SERVER_UNREACHABLE: {
    status: 400,
    code: 'TOOL_SERVER_UNREACHABLE',
    message: 'The MCP server did not answer: {reason}',
  },
  TOOL_SERVER_URL_NOT_HTTP: { status: 400, code: 'URL_NOT_ALLOWED', message: 'url must be an http(s) URL' },
  UNKNOWN_INTEGRATION_PACK: {
    status: 400,
    code: 'INVALID_BINDING',
    message: 'Unknown integration pack: {packId}',
  },
  UNKNOWN_SKILL: { status: 400, code: 'INVALID_BINDING', message: 'Unknown skill {s} in pack {packId}' },
  UNSUPPORTED_FILE_TYPE: {
    status: 400,
    code: 'UNSUPPORTED_FILE_TYPE',
    message: 'File type {type} not supported for {filename}',
  },
  UNSUPPORTED_IMAGE_TYPE: {
    status: 400,
    code: 'UNSUPPORTED_IMAGE_TYPE',
    message: 'The source is not a PNG, JPEG, WebP or GIF image',
  },
  UPLOAD_REFUSED: { status: 400, message: '{reason}' },
  URL_NOT_ALLOWED: { status: 400, code: 'URL_NOT_ALLOWED', message: '{field} is not allowed: {message}' },
  URL_NOT_HTTP: { status: 400, code: 'URL_NOT_ALLOWED', message: '{field} must be an http(s) URL' },
  URL_UNRESOLVABLE: {
    status: 400,
    code: 'URL_NOT_ALLOWED',
    message: '{field} cannot be resolved: {hostname}',
  },
  VALIDATION_ERROR: { status: 400, code: 'VALIDATION_ERROR', message: '{message}' },
  WEAK_PASSWORD: {
    status: 400,
    code: 'WEAK_PASSWORD',
    message: 'password must be at least {PASSWORD_MIN_LENGTH} characters',
  },
  WORKSPACE_ID_REQUIRED: { status: 400, message: 'workspace_id is required' },
  WORKSPACE_NAME_REQUIRED: { status: 400, message: 'Workspace name is required' },
  ZIP_REQUIRED: { status: 400, message: 'Zip file is required' },
  APP_UNAUTHORIZED: { status: 401, message: 'Unauthorized or app not found' },
  AUTHENTICATION_REQUIRED: { status: 401, message: 'Authentication required' },
  INVALID_API_KEY: { status: 401, message: 'Invalid API key' },
  INVALID_CREDENTIALS: { status: 401, code: 'INVALID_CREDENTIALS', message: 'Invalid email or password' },
  OIDC_EMAIL_MISSING: {
    status: 401,
    code: 'OIDC_EMAIL_MISSING',
    message: 'The identity provider did not give an email address: allow the email scope',
  },
  OIDC_PROVIDER_REFUSED: {
    status: 401,
    code: 'OIDC_PROVIDER_REFUSED',
    message: 'The identity provider refused the sign-in',
  },
  OIDC_TOKEN_INVALID: {
    status: 401,
    code: 'OIDC_TOKEN_INVALID',
    message: 'The identity provider’s answer could not be verified',
  },
  SESSION_INVALID: { status: 401, code: 'SESSION_INVALID', message: 'Authentication required' },
  SIGN_IN_REQUIRED: {
    status: 401,
    code: 'SIGN_IN_REQUIRED',
    message: 'Sign in as the invited person, or give their password, to accept this invitation',
  },
  UNAUTHORIZED: { status: 401, message: 'Unauthorized' },
  WIDGET_TOKEN_EXPIRED: { status: 401, code: 'WIDGET_TOKEN_EXPIRED', message: 'Widget token expired' },
  WIDGET_TOKEN_INVALID: { status: 401, code: 'WIDGET_TOKEN_INVALID', message: 'Invalid widget token' },
  INSUFFICIENT_CREDITS: {
    status: 402,
    code: 'INSUFFICIENT_CREDITS',
    message: 'Insufficient credits. Please purchase additional credits to continue.',
    variants: { appsChat: 'Insufficient credits' },
  },
  ACCESS_DENIED: { status: 403, message: 'Access denied to workspace' },
  CSRF_REJECTED: { status: 403, code: 'CSRF_REJECTED', message: 'Cross-site request refused' },
  CSRF_UNTRUSTED_ORIGIN: {
    status: 403,
    code: 'CSRF_REJECTED',
    message: 'Sign-in from an untrusted origin refused: add it to AUTH_TRUSTED_ORIGINS if it is yours',
  },
  INVALID_SIGNATURE: { status: 403, code: 'INVALID_SIGNATURE', message: 'Invalid or expired link' },
  KEY_MANAGEMENT_FORBIDDEN: { status: 403, message: 'Insufficient permissions to create API keys' },
  MEMBERS_FORBIDDEN: { status: 403, message: 'Insufficient permissions to manage members' },
  NO_ACTIVE_WORKSPACE: {
    status: 403,
    code: 'NO_ACTIVE_WORKSPACE',
    message: 'No active workspace: switch to a workspace first',
  },
  OIDC_DOMAIN_NOT_ALLOWED: {
    status: 403,
    code: 'OIDC_DOMAIN_NOT_ALLOWED',
    message: 'This email domain is not allowed to sign in here',
  },
  OIDC_EMAIL_UNVERIFIED: {
    status: 403,
    code: 'OIDC_EMAIL_UNVERIFIED',
    message: 'The identity provider has not verified this email address',
  },
  OWNER_ONLY: { status: 403, message: 'Only an owner can grant, change or remove the owner role' },
  RAG_NOT_ENABLED: { status: 403, message: 'RAG service not enabled for this workspace' },
  SIGNUP_DISABLED: { status: 403, code: 'SIGNUP_DISABLED', message: 'Sign-up is disabled' },
  SIGNUP_DISABLED_UNINVITED: {
    status: 403,
    code: 'SIGNUP_DISABLED',
    message: 'No account uses this email and sign-up is disabled: ask for an invitation',
  },
  TOKEN_LIMIT_EXCEEDED: { status: 403, message: 'Token limit exceeded' },
  TOOL_CALL_OTHER_SESSION: { status: 403, message: 'toolCallId does not belong to session' },
  TOOL_SERVERS_FORBIDDEN: { status: 403, message: 'Insufficient permissions to manage tool servers' },
  WIDGET_ORIGIN_NOT_ALLOWED: {
    status: 403,
    code: 'WIDGET_ORIGIN_NOT_ALLOWED',
    message: 'Origin not allowed',
  },
  WORKSPACE_ACCESS_DENIED: {
    status: 403,
    code: 'WORKSPACE_ACCESS_DENIED',
    message: 'Access denied to workspace',
  },
  AGENT_NOT_FOUND: { status: 404, message: 'Agent not found' },
  API_KEY_NOT_FOUND: { status: 404, message: 'API key not found' },
  APP_NOT_FOUND: { status: 404, code: 'APP_NOT_FOUND', message: 'App not found in this workspace' },
  CONVERSATION_NOT_FOUND: { status: 404, message: 'Conversation not found' },
  DOCUMENT_NOT_FOUND: { status: 404, message: 'Document not found' },
  EMPTY_FILE: { status: 404, message: 'Empty file' },
  FILE_NOT_FOUND: { status: 404, message: 'File not found' },
  FOLDER_NOT_FOUND: { status: 404, message: 'Folder not found' },
  INVITATION_NOT_FOUND: { status: 404, message: 'Invitation not found' },
  JOB_NOT_FOUND: { status: 404, code: 'JOB_NOT_FOUND', message: 'Job not found: {runId}' },
  MEMBER_NOT_FOUND: { status: 404, message: 'Member not found' },
  NOT_FOUND: { status: 404, code: 'NOT_FOUND', message: 'Not found' },
  OIDC_NOT_CONFIGURED: {
    status: 404,
    code: 'OIDC_NOT_CONFIGURED',
    message: 'Sign-in with an identity provider is not configured',
  },
  PACK_NOT_FOUND: { status: 404, message: 'Pack not found' },
  RUN_NOT_FOUND: { status: 404, message: 'Run not found' },
  SCHEDULE_NOT_FOUND: { status: 404, message: 'Schedule not found' },
  SESSION_NOT_FOUND: { status: 404, message: 'Session not found' },
  STORAGE_KEY_NOT_FOUND: { status: 404, message: 'Storage key not found' },
  THREAD_NOT_FOUND: { status: 404, message: 'Thread not found' },
  TOOL_SERVER_NOT_FOUND: { status: 404, message: 'Tool server not found' },
  UNKNOWN_TOOL_CALL: { status: 404, message: 'Unknown toolCallId' },
  USER_NOT_FOUND: { status: 404, message: 'User not found: {email}' },
  WIDGET_TOKEN_NOT_FOUND: { status: 404, message: 'Widget token not found' },
  WORKSPACE_NOT_FOUND: { status: 404, message: 'Workspace not found' },
  WORKSPACE_NOT_FOUND_NAMED: { status: 404, message: 'Workspace not found: {workspace}' },
  ACCOUNT_JUST_CREATED_SIGN_IN_AGAIN: {
    status: 409,
    message: 'An account with this email was just created: sign in again',
  },
  ACCOUNT_JUST_CREATED_SIGN_IN_FIRST: {
    status: 409,
    message: 'An account with this email was just created: sign in first',
  },
  ALREADY_MEMBER: { status: 409, code: 'ALREADY_MEMBER', message: 'Already a member of this workspace' },
  API_KEY_TAKEN: { status: 409, message: 'This API key is already registered' },
  APPROVAL_DECIDED: { status: 409, code: 'APPROVAL_DECIDED', message: 'toolCallId is already decided' },
  APPROVAL_EXPIRED: { status: 409, code: 'APPROVAL_EXPIRED', message: 'The approval deadline has passed' },
  EMAIL_TAKEN: { status: 409, code: 'EMAIL_TAKEN', message: 'An account with this email already exists' },
  LAST_OWNER: {
    status: 409,
    code: 'LAST_OWNER',
    message: 'A workspace must keep at least one owner: make someone else owner first',
  },
  OIDC_IDENTITY_CONFLICT: {
    status: 409,
    code: 'OIDC_IDENTITY_CONFLICT',
    message: 'This account is already linked to another account at the identity provider',
  },
  STORAGE_PATH_CONFLICT: {
    status: 409,
    code: 'STORAGE_PATH_CONFLICT',
    message: 'A file or folder named "{path}" already exists at {path2}',
  },
  TOOL_SERVER_NAME_TAKEN: {
    status: 409,
    code: 'TOOL_SERVER_NAME_TAKEN',
    message: 'A tool server named "{name}" is already connected',
  },
  TURN_IN_PROGRESS: {
    status: 409,
    code: 'TURN_IN_PROGRESS',
    message: 'A turn is already running in this session',
  },
  USER_EMAIL_TAKEN: { status: 409, code: 'EMAIL_TAKEN', message: 'A user with email {email} already exists' },
  WORKSPACE_ALREADY_EXISTS: { status: 409, message: 'Workspace "{name}" already exists' },
  WORKSPACE_NAME_TAKEN: {
    status: 409,
    code: 'WORKSPACE_NAME_TAKEN',
    message: 'Workspace "{name}" already exists',
  },
  IMAGE_TOO_LARGE: { status: 413, code: 'IMAGE_TOO_LARGE', message: 'The image exceeds {maxBytes} bytes' },
  IMPORT_ARCHIVE_OVERLAPPING: {
    status: 413,
    code: 'IMPORT_LIMIT_EXCEEDED',
    message: 'Archive declares more bytes than its size can hold (overlapping entries)',
  },
  IMPORT_ARCHIVE_TOO_LARGE: {
    status: 413,
    code: 'IMPORT_LIMIT_EXCEEDED',
    message:
      'Archive exceeds the import limits (at most {maxEntries} entries and {maxTotalBytes} uncompressed)',
  },
  IMPORT_FILE_TOO_LARGE: {
    status: 413,
    code: 'FILE_TOO_LARGE',
    message: 'File {name} exceeds the {limit} upload limit',
  },
  IMPORT_TOO_MANY_FILES: {
    status: 413,
    code: 'IMPORT_LIMIT_EXCEEDED',
    message: 'Too many files in one import (at most {maxEntries})',
  },
  REQUEST_BODY_TOO_LARGE: { status: 413, message: 'Request body too large' },
  UPLOAD_LIMIT_EXCEEDED: {
    status: 413,
    code: 'UPLOAD_LIMIT_EXCEEDED',
    message: 'Too many files in one upload (at most {MAX_FILES})',
  },
  PROVIDER_QUOTA_EXCEEDED: { status: 429, code: 'PROVIDER_QUOTA_EXCEEDED', message: '{providerMessage}' },
  QUOTA_EXCEEDED: { status: 429, code: 'QUOTA_EXCEEDED', message: 'Monthly quota exceeded' },
  RATE_LIMITED: { status: 429, code: 'RATE_LIMITED', message: 'Rate limit exceeded' },
  SIGN_IN_THROTTLED: {
    status: 429,
    code: 'SIGN_IN_THROTTLED',
    message: 'Too many failed sign-in attempts: try again later',
  },
  WIDGET_TOKEN_LIMIT_REACHED: {
    status: 429,
    code: 'WIDGET_TOKEN_LIMIT_REACHED',
    message: 'Widget token request limit reached',
  },
  IMAGE_GENERATION_FAILED: {
    status: 500,
    code: 'IMAGE_GENERATION_FAILED',
    message: 'Failed to generate image: {message}',
  },
  INTERNAL_ERROR: { status: 500, code: 'INTERNAL_ERROR', message: 'Internal server error' },
  PARTLY_FAILED: { status: 500, code: 'PARTLY_FAILED', message: '{failure}' },
  RAG_QUERY_FAILED: { status: 500, code: 'INTERNAL_ERROR', message: 'Failed to process query' },
  REPORT_FAILED: {
    status: 500,
    message: 'Failed to generate report: the model did not return a valid report',
  },
  UPLOAD_FAILED: { status: 500, code: 'INTERNAL_ERROR', message: 'Failed to upload files' },
  AGENT_MODEL_ERROR: { status: 502, message: 'AI model error: {detail}' },
  AI_MODEL_ERROR: { status: 502, code: 'AI_MODEL_ERROR', message: 'AI model error: {detail}' },
  AI_UNAVAILABLE: { status: 502, code: 'AI_UNAVAILABLE', message: 'AI service is temporarily unavailable' },
  GITHOST_FETCH_FAILED: {
    status: 502,
    code: 'GITHOST_FETCH_FAILED',
    message: 'GitHub archive fetch failed: {status}',
  },
  MODEL_ERROR: { status: 502, code: 'MODEL_ERROR', message: 'AI service is temporarily unavailable' },
  OIDC_PROVIDER_UNAVAILABLE: {
    status: 502,
    code: 'OIDC_PROVIDER_UNAVAILABLE',
    message: 'The identity provider could not be reached',
  },
  CONSOLE_NOT_BUILT: {
    status: 503,
    code: 'CONSOLE_NOT_BUILT',
    message: 'The web console is not built: run pnpm build',
  },
  MODEL_CONFIGURATION_ERROR: {
    status: 503,
    code: 'MODEL_CONFIGURATION_ERROR',
    message: 'Model configuration error',
  },
  NO_AI_MODEL_CONFIGURED: { status: 503, message: 'No AI model configured' },
  PROVIDER_NOT_CONFIGURED: { status: 503, message: 'Model configuration error' },
  SERVICE_UNAVAILABLE: {
    status: 503,
    code: 'SERVICE_UNAVAILABLE',
    message: 'Service temporarily unavailable',
    headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
  },
} as const satisfies Record<string, ErrorDefinition>;

export type ErrorKey = keyof typeof ERRORS;
