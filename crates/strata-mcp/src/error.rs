//! Errors: [`ServeError`] ends a server (bad address, transport failure);
//! [`ToolError`] is one tool call's failure, returned to the client as a
//! tool result with `isError` (the server keeps serving).

use rmcp::model::{CallToolResult, ContentBlock};

/// Why `strata mcp` could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The HTTP listener could not be bound.
    #[error("could not listen on {addr}: {source}. Give a free loopback address, e.g. --http 127.0.0.1:8766")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Only loopback addresses are served (the transport has no TLS).
    #[error("refusing to serve MCP over plain HTTP on {addr}: not a loopback address. Use 127.0.0.1:PORT or [::1]:PORT (put a TLS proxy in front for other hosts)")]
    NotLoopback {
        /// The address asked for.
        addr: String,
    },
    /// The MCP transport failed (initialization, a broken pipe).
    #[error("MCP {transport} transport failed: {message}")]
    Transport {
        /// `stdio` or `http`.
        transport: &'static str,
        /// What failed.
        message: String,
    },
}

/// One tool call's failure: a message a person (or an agent) can act on.
#[derive(Debug)]
pub(crate) struct ToolError(pub String);

impl ToolError {
    pub(crate) fn new(msg: impl Into<String>) -> ToolError {
        ToolError(msg.into())
    }

    pub(crate) fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(self.0)])
    }
}

impl From<strata_sdk::Error> for ToolError {
    fn from(e: strata_sdk::Error) -> ToolError {
        // The SDK's messages already say what failed and what to do.
        ToolError(e.to_string())
    }
}

pub(crate) type ToolResult = Result<CallToolResult, ToolError>;
