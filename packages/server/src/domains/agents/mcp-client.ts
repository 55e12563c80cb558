/**
 * The MCP SDK is loaded at the first turn of an agent with MCP servers, not at start: most
 * processes never use it and its modules held ~7 MB of the heap for good
 * (docs/decisions/0019-lean-embedded-database.md).
 */
export async function loadMcpClient() {
  const [{ Client }, { StreamableHTTPClientTransport }] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
  ]);
  return { Client, StreamableHTTPClientTransport };
}
